package main

import (
	"fmt"
	"strings"
)

// table is one section of the page, a comparison with what it runs and its
// rows.
type table struct {
	title, about string
	rows         []row
}

// tables are the page's sections, in order. sizes are bench/run.sh's host
// sizes (extra sleeps) and quick whether the run was bench/all.sh --quick,
// which runs the in-process benchmarks at their smallest size only.
func tables(sizes []string, quick bool) []table {
	return []table{
		{"Start-up", "`bench/startup.sh`: the release binary as `make` builds it (PIE, stripped, urfave/cli's docs, the NRI plugin and Prometheus's client library left out: `gpusnap nri` and `watch --listen` exec gpusnap-full) against a Go hello world built with the same flags, the same hello world with cgo (libc linked, as go-nvml needs), and gpusnap-man (the same source with every command and the docs, as the package's build runs it), in one hyperfine run. The figure is CPU (user + system), wall the ratio of medians.", []row{
			hyperfineRatio("`gpusnap --version` / Go hello world", "startup", "version", "hello", atMost(2, "x")),
			hyperfineRatio("Go hello world with cgo / Go hello world", "startup", "cgo", "hello", nil),
			hyperfineRatio("`gpusnap --version` / Go hello world with cgo", "startup", "version", "cgo", nil),
			hyperfineRatio("`gpusnap --help` / Go hello world", "startup", "help", "hello", nil),
			hyperfineRatio("`gpusnap-man --version` (urfave/cli's docs and NRI linked) / Go hello world", "startup", "man", "hello", nil),
			hyperfineRatio("`gpusnap --version` linked without PIE / Go hello world", "startup", "nopie", "hello", nil),
			hyperfineRatio("`gpusnap --version` / the same linked without PIE", "startup", "version", "nopie", nil),
		}},
		commandTable(sizes),
		inProcessTable(quick),
		{"Where the BPF path is refused", "`--capture auto` where the kernel refuses the BPF path, run as two callers it refuses (uid 65534, refused the first map; uid 65534 with CAP_BPF, refused the programs after the BTF read), against `--capture proc`, alternated; `before` is auto with the remembered refusal removed; \"without a store directory\" is auto whose `--db` lies in a directory not yet made, remembered in the runtime directory.", refusedRows()},
		gateTable(quick),
		{"check and diff", "The commands an operator and the Slurm prolog run, against the bare snapshot, in one hyperfine run each (extra sleeps as the command's table's smallest row).", []row{
			hyperfineRatio("`check` / `snapshot`", "check", "check", "snapshot", atMost(1.0, "x")),
			hyperfineRatio("`check` / `snapshot --no-store`", "check", "check", "nostore", nil),
			hyperfineRatio("`diff --tenant T` / `snapshot`", "tenant", "diff", "snapshot", atMost(1.5, "x")),
			benchMetric("`diff --tenant T` / `snapshot`, in process, alternated (wall)", "tenantgo", "DiffTenantVsSnapshot", metrics{fig: "diff/snapshot", unit: "x"}, atMost(1.5, "x")),
			benchMetric("`check --npd`, worst run, BPF path where it loads (5,000 processes)", "npd", "CheckNPD/auto", metrics{fig: "worst-s", unit: "s"}, atMost(5, "s")),
			benchMetric("`check --npd`, worst run, /proc path (5,000 processes)", "npd", "CheckNPD/proc", metrics{fig: "worst-s", unit: "s"}, atMost(5, "s")),
			benchMetric("`diff.Compare` of two snapshots of 10,000 processes, 2,000 device mappings", "compare", "Compare", metrics{fig: "ns/op", unit: "ms", scale: 1e-6}, atMost(50, "ms")),
		}},
		hostileTable(),
		storeTable(),
		{"Capture parts", "Parts of a capture against their own floors, in process.", []row{
			benchVersus("maps scanner against procfs `ProcMaps`, 50,000-line maps, not root", "maps", "MapsScanner", "ProcfsProcMaps", "ns/op", true, atLeast(10, "x")),
			benchVersus("maps scanner as root (every file-backed line parsed) against `ProcMaps`", "maps", "MapsScannerRoot", "ProcfsProcMaps", "ns/op", true, atLeast(10, "x")),
			benchVersus("maps scanner as root, a real stat a file-backed line, against `ProcMaps`", "maps", "MapsScannerRootStat", "ProcfsProcMaps", "ns/op", true, nil),
			benchMetric("triage with the binary cache / capture without triage", "triage", "Triage", metrics{fig: "cached-x-plain-cpu", unit: "x", wall: "cached-x-plain-wall", cpuA: "cached-cpu-ms", cpuB: "plain-cpu-ms"}, atMost(1.10, "x")),
			benchMetric("triage without the cache / capture without triage", "triage", "Triage", metrics{fig: "uncached-x-plain-cpu", unit: "x", wall: "uncached-x-plain-wall", cpuA: "uncached-cpu-ms", cpuB: "plain-cpu-ms"}, nil),
			benchMetric("NVML read, 8 GPUs and 100 processes (go-nvml's mock)", "nvml", "ReadNVML8x100", metrics{fig: "ns/op", unit: "ms", scale: 1e-6}, atMost(5, "ms")),
			benchMetric("NVML joined with 1,000 processes", "nvml", "GPUUsage8x100", metrics{fig: "ns/op", unit: "ms", scale: 1e-6}, nil),
			benchVersus("a window of 10,000 of 20,000 `--kmsg` records / reading the file's lines", "kmsg", "ReadWindowFile/gogc=400", "FileFloor", "cpu-ms/op", false, nil),
			benchMetric("a window of 10,000 of 20,000 `--kmsg` records, parsed (CPU)", "kmsg", "ReadWindowFile/gogc=400", metrics{fig: "cpu-ms/op", unit: "ms", cpu: "cpu-ms/op"}, atMost(5, "ms")),
			benchVersus("the live `/dev/kmsg`, every record / bare read(2) calls", "kmsg", "ReadWindowDevice", "DeviceFloor", "cpu-ms/op", false, nil),
		}},
		watchTable(),
	}
}

// gateTable is bench/gate.sh's table, the gate against fuser at 600 and
// 5,000 processes (600 alone in a quick run).
func gateTable(quick bool) table {
	sizes := []string{"600", "5000"}
	if quick {
		sizes = sizes[:1]
	}
	var rows []row
	for _, n := range sizes {
		s := "gate-" + n
		rows = append(rows,
			benchMetric("`check --gpus 0` (BPF path where it loads) / `fuser -v`", s, "", metrics{fig: "check-x-fuser-cpu", unit: "x", wall: "check-x-fuser-wall", cpuA: "check-cpu-ms", cpuB: "fuser-cpu-ms"}, atMost(1.2, "x")),
			benchMetric("`check --gpus 0 --capture proc` / `fuser -v`", s, "", metrics{fig: "proc-x-fuser-cpu", unit: "x", wall: "proc-x-fuser-wall", cpuA: "proc-cpu-ms", cpuB: "fuser-cpu-ms"}, atMost(1.2, "x")),
			benchMetric("what `check --gpus 0` adds to a job start (wall)", s, "", metrics{fig: "check-wall-ms", unit: "ms", cpu: "check-cpu-ms"}, nil),
			benchMetric("what `check --gpus 0 --capture proc` adds to a job start (wall)", s, "", metrics{fig: "proc-wall-ms", unit: "ms", cpu: "proc-cpu-ms"}, nil),
		)
	}
	return table{"The gate",
		"`bench/gate.sh`: `gpusnap check --gpus 0 --no-nvml` (a Slurm prolog's gate) by each capture path against `fuser -v /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm`, on a host of N processes, in a mount namespace whose `/dev` holds those nodes and with a BPF filesystem mounted, as systemd mounts one. The figure is the median of five alternated hyperfine rounds' CPU ratios, wall the median of their wall ratios; its wall time is what the gate adds to a job start.",
		rows}
}

func commandTable(sizes []string) table {
	var rows []row
	for _, n := range sizes {
		s := "command-" + n
		rows = append(rows,
			hyperfineRatio("`snapshot` (BPF path) / raw floor", s, "snapshot", "floor", atMost(1.0, "x")),
			hyperfineRatio("`snapshot` (BPF path) / `fuser -v`", s, "snapshot", "fuser", atMost(0.5, "x")),
			hyperfineRatio("`snapshot` (BPF path) / `lsof`", s, "snapshot", "lsof", nil),
			hyperfineRatio("`snapshot --capture proc` / raw floor", s, "proc", "floor", atMost(1.5, "x")),
			hyperfineRatio("`snapshot --capture proc` / `fuser -v`", s, "proc", "fuser", atMost(0.5, "x")),
			hyperfineRatio("`snapshot --capture proc` / `lsof`", s, "proc", "lsof", nil),
			hyperfineRatio("BPF path / `--capture proc`", s, "snapshot", "proc", nil),
			benchMetric("`snapshot --json --capture proc`, peak RSS", s, "", metrics{fig: "proc-rss-MiB", unit: "MiB", cpuNote: "—"}, nil),
		)
	}
	return table{"The command against the floor and peer tools",
		"`gpusnap snapshot --json --no-nvml --no-store` by each path against the raw floor (`bench/floor/rawfloor`: one thread reading every maps file and readlinking every fd, parsing nothing), `fuser -v` and `lsof` over six busy character devices, in one hyperfine run a host size (N extra sleeps). The figure is CPU; the targets are those the project set for the command.",
		rows}
}

func inProcessTable(quick bool) table {
	procSizes, pathSizes := []string{"600", "2000", "5000", "20000"}, []string{"600", "2000", "5000"}
	if quick {
		procSizes, pathSizes = procSizes[:1], pathSizes[:1]
	}
	var rows []row
	for _, n := range procSizes {
		rows = append(rows,
			benchMetric("/proc capture / floor, at least "+n+" processes", "procpath", "ProcPath/"+n, metrics{fig: "proc/floor-cpu", unit: "x", wall: "proc/floor-wall", cpuA: "proc-cpu-ms", cpuB: "floor-cpu-ms"}, atMost(1.5, "x")),
			benchMetric("/proc capture with the last capture's caches / floor, at least "+n+" processes", "procpath", "ProcPath/"+n, metrics{fig: "cached/floor-cpu", unit: "x", wall: "cached/floor-wall", cpuA: "cached-cpu-ms", cpuB: "floor-cpu-ms"}, atMost(1.3, "x")),
			benchMetric("the same, median of the rounds' ratios, at least "+n+" processes", "procpath", "ProcPath/"+n, metrics{fig: "cached/floor-cpu-median", unit: "x", cpuNote: "ratio of each round"}, atMost(1.3, "x")),
			benchMetric("the same, the least of the rounds' ratios, at least "+n+" processes", "procpath", "ProcPath/"+n, metrics{fig: "cached/floor-cpu-min", unit: "x", cpuNote: "ratio of each round"}, nil),
			benchMetric("the same, the most of the rounds' ratios, at least "+n+" processes", "procpath", "ProcPath/"+n, metrics{fig: "cached/floor-cpu-max", unit: "x", cpuNote: "ratio of each round"}, nil),
		)
	}
	for _, n := range pathSizes {
		rows = append(rows,
			benchMetric("BPF capture / floor, at least "+n+" processes", "paths", "Paths/"+n, metrics{fig: "bpf/floor-cpu", unit: "x", wall: "bpf/floor-wall", cpuA: "bpf-cpu-ms", cpuB: "floor-cpu-ms"}, atMost(0.4, "x")),
			benchMetric("the same, median [least-most] of the rounds' ratios, at least "+n+" processes", "paths", "Paths/"+n, metrics{fig: "bpf/floor-cpu-median", unit: "x", lo: "bpf/floor-cpu-min", hi: "bpf/floor-cpu-max", cpuNote: "ratio of each round"}, atMost(0.4, "x")),
			benchMetric("BPF capture / /proc capture, at least "+n+" processes", "paths", "Paths/"+n, metrics{fig: "bpf/proc-cpu", unit: "x", wall: "bpf/proc-wall", cpuA: "bpf-cpu-ms", cpuB: "proc-cpu-ms"}, nil),
		)
	}
	rows = append(rows,
		benchMetric("BPF / /proc, one process with 100,000 mappings and 20,000 fds", "paths", "HeavyProcess", metrics{fig: "bpf/proc-cpu", unit: "x", wall: "bpf/proc-wall", cpuA: "bpf-cpu-ms", cpuB: "proc-cpu-ms"}, atMost(0.1, "x")),
		benchMetric("the first BPF capture, which loads the iterators (CPU)", "paths", "HeavyProcess", metrics{fig: "bpf-load-cpu-ms", unit: "ms", cpu: "bpf-load-cpu-ms"}, nil),
		benchMetric("/proc capture / floor, alternated", "overfloor", "CaptureOverFloor/proc", metrics{fig: "x-floor-cpu", unit: "x", wall: "x-floor", cpuA: "capture-cpu-ms", cpuB: "floor-cpu-ms"}, nil),
		benchMetric("BPF capture / floor, alternated", "overfloor", "CaptureOverFloor/bpf", metrics{fig: "x-floor-cpu", unit: "x", wall: "x-floor", cpuA: "capture-cpu-ms", cpuB: "floor-cpu-ms"}, nil),
	)
	return table{"The capture paths in process",
		"Each capture path alternated with the raw floor in one benchmark, without the command's start-up and JSON; CPU is the process's user+system, the kernel's work for it included. \"With the last capture's caches\" is a /proc capture after one that left its process and binary caches beside a store, as every command with a store runs; the rounds' own ratios are given beside the ratio of their sums, as a shared host's load moves them less.",
		rows}
}

func refusedRows() []row {
	var rows []row
	for _, extra := range []string{"0", "500"} {
		for _, caller := range []string{"nobody", "nobody+CAP_BPF"} {
			b := "RefusedAuto/extra=" + extra + "/" + caller
			who := strings.Replace(caller, "nobody", "uid 65534", 1)
			rows = append(rows,
				benchMetric("auto / proc, "+who+", "+extra+" extra sleeps", "refused", b, metrics{fig: "auto/proc-cpu", unit: "x", wall: "auto/proc-wall", cpuA: "auto-cpu-ms", cpuB: "proc-cpu-ms"}, atMost(1.05, "x")),
				benchMetric("before (nothing remembered) / proc, "+who+", "+extra+" extra sleeps", "refused", b, metrics{fig: "first/proc-cpu", unit: "x", cpuA: "auto-first-cpu-ms", cpuB: "proc-cpu-ms"}, nil),
				benchMetric("auto without a store directory / proc, "+who+", "+extra+" extra sleeps", "refused", b, metrics{fig: "nostore/proc-cpu", unit: "x", wall: "nostore/proc-wall", cpuA: "auto-nostore-cpu-ms", cpuB: "proc-cpu-ms"}, atMost(1.05, "x")),
			)
		}
	}
	return rows
}

func hostileTable() table {
	var rows []row
	for _, tenant := range []struct{ name, what string }{
		{"maps", "one process mapping `nvidia0` 100,000 times"},
		{"argv", "5.5 MB of arguments, 100 forked children sharing them"},
	} {
		for _, path := range []string{"bpf", "proc"} {
			p := tenant.name + "-" + path
			var cpuTarget *target
			if tenant.name == "maps" {
				cpuTarget = atMost(2, "x")
			}
			rows = append(rows,
				benchMetric(tenant.what+", "+path+" path / raw floor", "hostile", "", metrics{fig: p + "/floor-cpu", unit: "x", wall: p + "/floor-wall", cpuA: p + "-cpu-ms", cpuB: tenant.name + "-floor-cpu-ms"}, cpuTarget),
				benchMetric(tenant.what+", "+path+" path, peak RSS", "hostile", "", metrics{fig: p + "-rss-MiB", unit: "MiB", cpuNote: "—"}, atMost(64, "MiB")),
			)
		}
	}
	return table{"Hostile tenants", "`bench/hostile.sh` on a loop device reached through a node named `nvidia0`: `snapshot --json` by each capture path against the raw floor, one hyperfine run a tenant, and each path's peak RSS. The floor reads no command line: the arguments tenant's ratio is the hashing of every command line to its end.", rows}
}

func storeTable() table {
	return table{"The store", "`bench/store.sh` fills a store with 10 real captures of the host and 990 more stored again (`BenchmarkStore`), then times the commands on it; `bench/codec.sh` stores two snapshots of a host of thousands of processes and times `show` and `diff` of them.", []row{
		benchMetric("first snapshot (pages holding data)", "store", "Store", metrics{fig: "first-KB", unit: "KB"}, nil),
		benchMetric("largest growth of one real further snapshot / the first", "store", "Store", metrics{fig: "real-max-grow-%", unit: "%"}, atMost(5, "%")),
		benchMetric("largest growth of one snapshot of the unchanged host / the first", "store", "Store", metrics{fig: "max-grow-%", unit: "%"}, atMost(5, "%")),
		benchMetric("1,000 real snapshots, projected (the first + 999 x the real mean)", "store", "Store", metrics{fig: "real-1000-MB", unit: "MB"}, atMost(50, "MB")),
		benchMetric("storing / capturing, the first 10 (alternated)", "store", "Store", metrics{fig: "store-over-capture", unit: "%", scale: 100, cpuA: "store-ms", cpuB: "capture-ms"}, atMost(10, "%")),
		benchMetric("storing / capturing, 10 more into the full store", "store", "Store", metrics{fig: "steady-store-over-capture", unit: "%", scale: 100}, atMost(10, "%")),
		hyperfineTime("`list` of 1,000 snapshots", "store", "list", atMost(50, "ms")),
		hyperfineTime("`show ID`", "store", "show", atMost(20, "ms")),
		hyperfineTime("`show --json ID`", "store", "show-json", atMost(20, "ms")),
		hyperfineRatio("`diff A B` / `show A`, two stored snapshots", "codec", "new-diff", "new-show", atMost(3, "x")),
		hyperfineRatio("`show --json A` / `show A`", "codec", "new-show-json", "new-show", atMost(2, "x")),
		benchVersus("decoding a process record: JSON / binary", "storego", "DecodeRecord/json", "DecodeRecord/binary", "ns/op", false, nil),
		benchMetric("append one leaf to a log of 10,000", "storego", "LogAppend", metrics{fig: "ns/op", unit: "ms", scale: 1e-6}, atMost(1, "ms")),
		benchMetric("`store verify` of 10,000 leaves", "storego", "VerifyLog10000", metrics{fig: "ns/op", unit: "ms", scale: 1e-6}, atMost(1000, "ms")),
	}}
}

func watchTable() table {
	rows := []row{
		benchMetric("watch's CPU on an idle host, BPF mode (a share of one core)", "watch", "", metrics{fig: "idle-bpf-pct", unit: "%", cpuNote: "the figure (ticks of /proc/PID/stat)"}, atMost(0.5, "%")),
		benchMetric("watch's CPU on an idle host, fallback mode", "watch", "", metrics{fig: "idle-fallback-pct", unit: "%", cpuNote: "the figure (ticks of /proc/PID/stat)"}, nil),
		benchMetric("fallback's CPU, 5,000 idle sleeps, the connector heard, no process started (a share of one core)", "fallback", "FallbackIdle", metrics{fig: "idle-%core", unit: "%", cpu: "idle-cpu-ms"}, atMost(0.5, "%")),
		benchMetric("fallback's CPU, 5,000 idle sleeps, the connector heard, this host's own activity", "fallback", "FallbackIdle", metrics{fig: "connector-%core", unit: "%", cpu: "connector-cpu-ms"}, nil),
		benchMetric("fallback's CPU, 5,000 idle sleeps, the connector refused (/proc listed every interval, as before)", "fallback", "FallbackIdle", metrics{fig: "periodic-%core", unit: "%", cpu: "periodic-cpu-ms"}, nil),
		benchMetric("processes and threads the host started a second meanwhile", "fallback", "FallbackIdle", metrics{fig: "host-forks/s", unit: "/s"}, nil),
		benchMetric("open/close loop of a regular file with watch / without (wall of the loop)", "watch", "", metrics{fig: "loop-ratio", unit: "x", cpuNote: "wall only"}, atLeast(0.90, "x")),
		metricRatio("opens of the node recorded / made: 10,000 a second paced beside 100,000 unpaced", "watch", "rate-recorded", "rate-made", "x", "—", atLeast(1, "x")),
		benchMetric("events the kernel dropped meanwhile", "watch", "", metrics{fig: "rate-lost", unit: "events", cpuNote: "—"}, atMost(0, "events")),
		benchMetric("watch's CPU meanwhile (a share of one core)", "watch", "", metrics{fig: "rate-cpu-pct", unit: "%", cpuNote: "the figure (ticks of /proc/PID/stat)"}, nil),
		benchMetric("utilization sampling, one interval, 8 GPUs x 64 processes (a share of a core at 1 s)", "util", "UtilSampling", metrics{fig: "cpu-%core@1s", unit: "%"}, atMost(0.5, "%")),
		benchMetric("utilization log a GPU an hour", "util", "UtilSampling", metrics{fig: "MB/GPU-hour", unit: "MB"}, atMost(2, "MB")),
		benchVersus("utilization sampling / the mock's calls alone", "util", "UtilSampling", "UtilFloor", "cpu-ns/op", false, nil),
	}
	for _, hook := range []string{"lsm", "fentry", "kprobe", "tracepoint"} {
		if hook == "kprobe" {
			// A kprobe's dispatch is the kernel's own price, so the watch is
			// held to the empty programs beside it, not to a fixed speed.
			rows = append(rows,
				hookRow("open/close with the kprobe watch / bare", hook, "watch", nil),
				hookRow("open/close with empty kprobe programs / bare (the kernel's floor)", hook, "empty", nil),
				hookGap("open/close: the kprobe watch's speed below the empty kprobe programs'", hook, atMost(1, "points")))
			continue
		}
		rows = append(rows,
			hookRow("open/close with the "+hook+" watch / bare", hook, "watch", atLeast(0.90, "x")),
			hookRow("open/close with empty "+hook+" programs / bare (the kernel's floor)", hook, "empty", nil))
	}
	return table{"watch", "`bench/watch.sh` runs a watch on this host (the hook this kernel allows); `BenchmarkFallbackIdle` runs the fallback's event loop in process, its CPU over 20 s of each way of running it; `TestHookCost` times an open and close of a regular file on one thread's CPU clock with each hook's programs attached, the median of its rounds; a hook this kernel refuses reads \"refused here\".", rows}
}

// hookGap is how far a hook's watch programs slow an open and close below
// empty programs on the same points. It is the two speeds' difference, in
// points of the bare loop's (TestHookCost's line, as hookRow reads it).
func hookGap(what, hook string, t *target) row {
	return row{what: what, step: "hooks", target: t, get: func(s *stepResult) (figure, error) {
		watch, okW := s.metric["hook-"+hook+"-watch"]
		empty, okE := s.metric["hook-"+hook+"-empty"]
		if !okW || !okE {
			return figure{text: "refused here", cpu: "—", wall: "—", refused: true}, nil
		}
		v := (empty - watch) * 100
		return figure{value: v, text: format(v, "points"), cpu: fmt.Sprintf("%.0f ns bare", s.metric["hook-"+hook+"-bare-ns"]), wall: "thread CPU clock"}, nil
	}}
}

// hookRow is one hook's TestHookCost line. A hook the kernel refuses has
// none, which the row says rather than leaving a gap.
func hookRow(what, hook, which string, t *target) row {
	return row{what: what, step: "hooks", target: t, get: func(s *stepResult) (figure, error) {
		v, ok := s.metric["hook-"+hook+"-"+which]
		if !ok {
			return figure{text: "refused here", cpu: "—", wall: "—", refused: true}, nil
		}
		return figure{value: v, text: format(v, "x"), cpu: fmt.Sprintf("%.0f ns bare", s.metric["hook-"+hook+"-bare-ns"]), wall: "thread CPU clock"}, nil
	}}
}
