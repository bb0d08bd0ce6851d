package eventlog

import (
	"testing"
	"time"
)

func TestUtilSeries(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := UtilProcess{PID: 42, StartTime: 7}
	p.Append(98, 40)
	p.AppendAbsent()
	p.Append(250, -3) // clamped into 0..100
	gpu := Util{GPU: "GPU-a", At: []int64{0, 1000, 2000}, SM: []int{98, -1, 100}, Mem: []int{40, -1, 3},
		UsedMiB: []int64{100, -1, 100}, Listed: []int{1, -1, 1}, Procs: []UtilProcess{p}, More: 2, Notes: []string{"n"}}
	mig := Util{GPU: "MIG-a", Parent: "GPU-a", At: []int64{0}, SM: []int{-1}, Mem: []int{-1}, UsedMiB: []int64{5}, Listed: []int{0}}
	other := Util{GPU: "GPU-b", At: []int64{0, 1000}, SM: []int{1}, Mem: []int{1, 2}, UsedMiB: []int64{1, 2}, Listed: []int{0, 0}} // damaged: SM short
	events := []Event{
		{Time: t0, Kind: KindUtil, Util: &gpu},
		{Time: t0, Kind: KindUtil, Util: &mig},
		{Time: t0, Kind: KindUtil, Util: &other},
		{Time: t0.Add(3 * time.Second), Kind: KindUtil, Util: &gpu},
		{Time: t0, Kind: KindAlive},
	}
	all := Series(events, "")
	if len(all) != 3 || all[0].GPU != "GPU-a" || len(all[0].Samples) != 6 || all[0].More != 4 || len(all[0].Notes) != 1 || len(all[2].Samples) != 1 {
		t.Fatalf("series: %+v", all)
	}
	s := all[0].Samples
	if len(s[0].Processes) != 1 || s[0].Processes[0] != (UtilProcSample{PID: 42, StartTime: 7, SM: 98, Mem: 40}) || len(s[1].Processes) != 0 || s[1].SM != -1 {
		t.Errorf("samples 0, 1: %+v", s[:2])
	}
	if s[2].Processes[0].SM != 100 || s[2].Processes[0].Mem != 0 || !s[4].Time.Equal(t0.Add(4*time.Second)) {
		t.Errorf("samples 2, 4: %+v", s)
	}
	if one := Series(events, "GPU-a"); len(one) != 2 || one[1].GPU != "MIG-a" {
		t.Errorf("--gpu GPU-a: %+v", one)
	}
	if none := Series(events, "GPU-z"); len(none) != 0 {
		t.Errorf("--gpu GPU-z: %+v", none)
	}
	// A value string cut short or not hex reads as absent, never as a figure.
	bad := UtilProcess{U: "62zz6"}
	if _, _, ok := bad.Value(0); ok {
		t.Error("a damaged value read")
	}
}
