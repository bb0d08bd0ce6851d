package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestListNewestFirstWithFilters(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := storeArgs(t, db)
	if code, out, _ := gpusnap(t, append([]string{"list", "--json"}, g...)...); code != 2 || out != "" {
		t.Errorf("list of a missing store: %d %q", code, out)
	}
	var ids []string
	for _, args := range [][]string{{"snapshot"}, {"baseline", "--tenant", "job-1"}, {"snapshot", "--label", "post", "--tenant", "job-1"}} {
		code, out, errs := gpusnap(t, append(args, g...)...)
		if code != 0 {
			t.Fatal(errs)
		}
		ids = append(ids, lastLine(out))
	}
	list := func(args ...string) []map[string]any {
		t.Helper()
		code, out, errs := gpusnap(t, append(append([]string{"list", "--json"}, g...), args...)...)
		if code != 0 {
			t.Fatalf("list %v: %s", args, errs)
		}
		var ms []map[string]any
		if err := json.Unmarshal([]byte(out), &ms); err != nil {
			t.Fatalf("list --json: %v\n%s", err, out)
		}
		return ms
	}
	all := list()
	if len(all) != 3 || all[0]["id"] != ids[2] || all[2]["id"] != ids[0] {
		t.Fatalf("not newest first: %v", all)
	}
	for _, key := range []string{"id", "label", "tenant", "host", "time"} {
		if _, ok := all[0][key]; !ok {
			t.Errorf("list --json lacks %q", key)
		}
	}
	if _, err := time.Parse(time.RFC3339, all[0]["time"].(string)); err != nil {
		t.Errorf("time is not RFC 3339: %v", err)
	}
	if ms := list("--tenant", "job-1"); len(ms) != 2 {
		t.Errorf("--tenant: %v", ms)
	}
	if ms := list("--label", "baseline"); len(ms) != 1 || ms[0]["id"] != ids[1] {
		t.Errorf("--label: %v", ms)
	}
	if ms := list("--since", "1h"); len(ms) != 3 {
		t.Errorf("--since 1h: %v", ms)
	}
	if ms := list("--since", time.Now().Add(time.Hour).Format(time.RFC3339)); len(ms) != 0 {
		t.Errorf("--since the future: %v", ms)
	}
	if code, _, errs := gpusnap(t, append([]string{"list", "--since", "yesterday"}, g...)...); code != 2 || !strings.Contains(errs, "--since") {
		t.Errorf("bad --since: %d %s", code, errs)
	}
	code, out, _ := gpusnap(t, append([]string{"list"}, g...)...)
	if code != 0 || !strings.HasPrefix(out, "ID ") || strings.Count(out, "\n") != 4 {
		t.Errorf("list table:\n%s", out)
	}
	if code, out, _ := gpusnap(t, append([]string{"list", "--json", "--tenant", "nobody"}, g...)...); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("empty list --json: %q", out)
	}
}
