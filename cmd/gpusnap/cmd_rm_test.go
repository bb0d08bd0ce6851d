package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestRmByPrefixKeepsLatestBaseline(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := storeArgs(t, db)
	var ids []string
	for _, args := range [][]string{{"snapshot"}, {"baseline", "--tenant", "job-1"}} {
		code, out, errs := gpusnap(t, append(args, g...)...)
		if code != 0 {
			t.Fatal(errs)
		}
		ids = append(ids, lastLine(out))
	}
	rm := func(args ...string) (int, string, string) {
		return gpusnap(t, append(append([]string{"rm"}, g...), args...)...)
	}
	if code, _, errs := rm("2"); code != 2 || !strings.Contains(errs, "ambiguous") {
		t.Errorf("ambiguous prefix: %d %s", code, errs)
	}
	if code, _, errs := rm(ids[1]); code != 2 || !strings.Contains(errs, "latest baseline") {
		t.Errorf("latest baseline: %d %s", code, errs)
	}
	if code, out, errs := rm(ids[0][:24]); code != 0 || strings.TrimSpace(out) != ids[0] {
		t.Errorf("rm by prefix: %d %q %s", code, out, errs)
	}
	if code, _, errs := rm(ids[0]); code != 2 || !strings.Contains(errs, "no such snapshot") {
		t.Errorf("rm of a removed id: %d %s", code, errs)
	}
	if code, out, _ := rm("--force", ids[1]); code != 0 || strings.TrimSpace(out) != ids[1] {
		t.Errorf("rm --force: %d %q", code, out)
	}
	if code, _, errs := rm(); code != 2 || !strings.Contains(errs, "usage") {
		t.Errorf("rm without id: %d %s", code, errs)
	}
}

func TestPruneKeepsNewestAndBaselines(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := storeArgs(t, db)
	for _, args := range [][]string{{"baseline", "--tenant", "job-1"}, {"snapshot"}, {"snapshot"}, {"snapshot"}} {
		if code, _, errs := gpusnap(t, append(args, g...)...); code != 0 {
			t.Fatal(errs)
		}
	}
	prune := func(args ...string) (int, string, string) {
		return gpusnap(t, append(append([]string{"prune"}, g...), args...)...)
	}
	if code, _, errs := prune(); code != 2 || !strings.Contains(errs, "--keep-last") {
		t.Errorf("prune without rule: %d %s", code, errs)
	}
	if code, out, errs := prune("--keep-last", "1", "--dry-run"); code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(errs, "would remove 2") {
		t.Errorf("dry run: %d %q %s", code, out, errs)
	}
	if code, out, _ := prune("--keep-last", "1", "--dry-run", "--json"); code != 0 || strings.Count(out, `"id"`) != 2 {
		t.Errorf("dry run --json: %d %s", code, out)
	}
	if code, out, _ := prune("--keep-last", "1", "--older-than", "1h"); code != 0 || out != "" {
		t.Errorf("nothing is older than 1h: %d %q", code, out)
	}
	if code, _, errs := prune("--keep-last", "1"); code != 0 || !strings.Contains(errs, "removed 2") {
		t.Errorf("prune: %d %s", code, errs)
	}
	code, out, _ := gpusnap(t, append([]string{"list"}, g...)...)
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, "baseline") {
		t.Errorf("after prune, want the newest and the baseline:\n%s", out)
	}
	if code, _, errs := prune("--keep-last", "1", "--force"); code != 0 || !strings.Contains(errs, "removed 1") {
		t.Errorf("prune --force: %d %s", code, errs)
	}
}
