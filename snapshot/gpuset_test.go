package snapshot

import (
	"strings"
	"testing"
)

func TestParseGPUList(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"0,1", "0,1", ""},
		{"0-3", "0,1,2,3", ""},
		{" 3, 1-2 ,1", "1,2,3", ""},
		{"GPU-8f2c1e4a-0000-1111-2222-333344445555,0", "0,GPU-8f2c1e4a-0000-1111-2222-333344445555", ""},
		{"MIG-5b3c", "MIG-5b3c", ""},
		{"amd:1-2,0,card1,0000:03:00.0,amd:0,intel:0", "0,0000:03:00.0,amd:0,amd:1,amd:2,card1,intel:0", ""},
		{"amd:GPU-8f2c1e4a5b6c7d8e", "amd:GPU-8f2c1e4a5b6c7d8e", ""},
		{"amd:x", "", "not VENDOR:N"},
		{"amd:2-1", "", "not VENDOR:N"},
		{"amd:GPU-../x", "", "not a GPU UUID"},
		{"nvidia:0", "", "not a GPU number"},
		{"0000:03:00.8", "", "not a GPU number"},
		{"", "", ""},
		{"3-1", "", "not a GPU number"},
		{"0-99999", "", "not a GPU number"},
		{"255", "", "not a GPU number"},
		{"-1", "", "not a GPU number"},
		{"a", "", "not a GPU number"},
		{"0,,1", "", "not a GPU number"},
		{"GPU-../../x", "", "not a GPU UUID"},
		{"GPU-" + strings.Repeat("a", 200), "", "not a GPU UUID"},
		{strings.Repeat("0,", 2000) + "0", "", "more than 1024"},
	} {
		s, err := ParseGPUList(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%.40q: err %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%.40q: %v", tc.in, err)
		case tc.err == "" && s.String() != tc.want:
			t.Errorf("%.40q: %q, want %q", tc.in, s.String(), tc.want)
		}
	}
}

func TestAllocationFromEnv(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, tc := range []struct {
		env          func(string) string
		want, source string
		isNil        bool
	}{
		{env("SLURM_JOB_ID", "7", "SLURM_JOB_GPUS", "1,3", "CUDA_VISIBLE_DEVICES", "0"), "1,3", "SLURM_JOB_GPUS", false},
		{env("CUDA_VISIBLE_DEVICES", "GPU-ab12"), "GPU-ab12", "CUDA_VISIBLE_DEVICES", false},
		{env("SLURM_JOB_ID", "7"), "", "SLURM_JOB_ID without SLURM_JOB_GPUS", false},
		{env("ROCR_VISIBLE_DEVICES", "1,0", "HIP_VISIBLE_DEVICES", "0"), "amd:0,amd:1", "ROCR_VISIBLE_DEVICES", false},
		{env("HIP_VISIBLE_DEVICES", "GPU-8f2c1e4a5b6c7d8e"), "amd:GPU-8f2c1e4a5b6c7d8e", "HIP_VISIBLE_DEVICES", false},
		{env("ZE_AFFINITY_MASK", "0.1,2"), "intel:0,intel:2", "ZE_AFFINITY_MASK", false},
		{env("SLURM_JOB_ID", "7", "SLURM_JOB_GPUS", "1", "ROCR_VISIBLE_DEVICES", "0", "ZE_AFFINITY_MASK", "0"), "1,amd:0,intel:0",
			"SLURM_JOB_GPUS, ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK", false},
		{env(), "", "", true},
	} {
		s, source, err := AllocationFromEnv(tc.env)
		if err != nil || (s == nil) != tc.isNil || source != tc.source || (s != nil && s.String() != tc.want) {
			t.Errorf("got %v %q %v, want %q %q nil=%v", s, source, err, tc.want, tc.source, tc.isNil)
		}
	}
	if _, _, err := AllocationFromEnv(env("SLURM_JOB_GPUS", "x")); err == nil || !strings.Contains(err.Error(), "SLURM_JOB_GPUS") {
		t.Errorf("bad variable: %v", err)
	}
	if _, _, err := AllocationFromEnv(env("ROCR_VISIBLE_DEVICES", "0,x")); err == nil || !strings.Contains(err.Error(), "ROCR_VISIBLE_DEVICES: GPU list: \"amd:x\"") {
		t.Errorf("bad variable: %v", err)
	}
}
