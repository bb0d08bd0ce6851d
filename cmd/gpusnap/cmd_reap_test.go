package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
)

// TestReapJobEndedJudgesAsDiff: reap --job-ended judges as diff --job-ended
// does. The job's process that outlived it is leftover_worker in both, so
// reap's evidence, OCSF and lead line name the class the epilog's diff
// names, not the running job's tenant.
func TestReapJobEndedJudgesAsDiff(t *testing.T) {
	const name = "triage-tenant"
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	before, after := sideArgs(db, name, "before"), sideArgs(db, name, "after")
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", name}, before...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", name, "--job-ended"}, after...)...)
	if code != exitFindings {
		t.Fatalf("diff: exit %d: %s", code, stderr)
	}
	var doc struct {
		Findings []diff.Finding `json:"findings"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	classes := func(fs []diff.Finding) map[string]string {
		m := map[string]string{}
		for _, f := range fs {
			if f.Process != nil && f.Triage != nil {
				m[f.Kind+" "+f.Process.Key()] = f.Triage.Class
			}
		}
		return m
	}
	want := classes(doc.Findings)
	if len(want) == 0 {
		t.Fatalf("diff --job-ended triaged no process: %s", stdout)
	}

	// The judgement reap acts on, from reap's own flags.
	var judged *judgement
	app := newApp(&bytes.Buffer{}, &bytes.Buffer{})
	for _, cmd := range app.Commands {
		if cmd.Name == "reap" {
			cmd.Action = action(parseReap, func(ctx context.Context, g globals, o reapOptions) (err error) {
				judged, err = o.judge(ctx, g, g.host())
				return err
			})
		}
	}
	args := append([]string{"gpusnap", "reap", "--tenant", name, "--job-ended"}, after...)
	if err := app.RunContext(context.Background(), permuteArgs(app, args)); err != nil {
		t.Fatal(err)
	}
	got := classes(judged.Result.Findings)
	for k, class := range want {
		if got[k] != class {
			t.Errorf("%s: reap --job-ended judges it %q, diff --job-ended %q", k, got[k], class)
		}
	}
	if want["leftover_device_holder 3400@95000"] != diff.ClassLeftoverWorker {
		t.Errorf("the job's process outlived it, yet diff --job-ended classes %v", want)
	}
}
