package nvmlread

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusnap/gpusnap/internal/lazyregexp"
	"github.com/gpusnap/gpusnap/internal/safefile"

	"github.com/gpusnap/gpusnap/snapshot"
)

// nvmlFixture is the NVML fixture of docs/spec.md (Fixtures). It holds
// NVML's values under NVML's field names, with sizes in bytes and a missing
// field meaning "not reported". Errors adds what a call answered instead of
// a value, keyed by the path Missing uses (as in
// `"devices[0].memory": "ERROR_GPU_IS_LOST"`), so a state with failures
// replays exactly.
type nvmlFixture struct {
	DriverVersion     string            `json:"driver_version,omitempty"`
	NVMLVersion       string            `json:"nvml_version,omitempty"`
	CUDADriverVersion int               `json:"cuda_driver_version,omitempty"`
	Devices           []snapshot.GPU    `json:"devices"`
	Errors            map[string]string `json:"errors,omitempty"`
	// Series is, for watch, the states it samples over time. Each entry's
	// devices replace the state from At seconds after the watch starts.
	Series []seriesEntry `json:"series,omitempty"`
}

// seriesEntry is one state of a fixture's series.
type seriesEntry struct {
	At      float64        `json:"at"` // seconds after the watch starts
	Devices []snapshot.GPU `json:"devices"`
}

// maxFixtureSize bounds an NVML fixture. A real host's state (8 GPUs, a
// thousand processes) is about 100 KB, and JSON costs far more in memory
// than on disk, so a stranger's 79 MB file would cost gigabytes to decode.
const maxFixtureSize = 8 << 20

// loadNVMLFixture reads and checks a fixture file. Its errors name the file
// and the field, as in `nvml fixture x.json: devices[1].memory.used: want a number`.
func loadNVMLFixture(path string) (*fixtureLib, error) {
	data, err := safefile.ReadFile(path, maxFixtureSize)
	if err != nil {
		return nil, fmt.Errorf("nvml fixture: %w", err)
	}
	f, err := parseNVMLFixture(data)
	if err != nil {
		return nil, fmt.Errorf("nvml fixture %s: %w", path, err)
	}
	return &fixtureLib{f: f, devices: f.Devices}, nil
}

func parseNVMLFixture(data []byte) (*nvmlFixture, error) {
	// The shape is checked against the Go types first, since json.Unmarshal's
	// own errors name neither array indices nor, for unknown fields, where
	// they stood.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, jsonSyntaxError(data, err)
	}
	if dec.More() {
		return nil, errors.New("data after the JSON object")
	}
	top, ok := tree.(map[string]any)
	if !ok { // checkShape lets null through, as "not reported", but a whole file of it is no fixture
		return nil, errors.New("top level: want an object")
	}
	if err := checkDuplicateKeys(data); err != nil {
		return nil, err
	}
	if err := checkShape("", tree, reflect.TypeOf(nvmlFixture{})); err != nil {
		return nil, err
	}
	var f nvmlFixture
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err // checkShape lets through nothing Unmarshal refuses
	}
	if err := f.check(top); err != nil {
		return nil, err
	}
	return &f, nil
}

func jsonSyntaxError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:se.Offset], []byte("\n"))
		return fmt.Errorf("line %d: %v", line, se)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("not a complete JSON object")
	}
	return err
}

// checkShape reports the first value of tree that does not fit type t, by its path.
func checkShape(path string, v any, t reflect.Type) error {
	if v == nil {
		return nil // null is "not reported", as an absent field
	}
	field := func(name string) string {
		if path == "" {
			return name
		}
		return path + "." + name
	}
	switch t.Kind() {
	case reflect.Pointer:
		return checkShape(path, v, t.Elem())
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return shapeError(path, "want an object")
		}
		fields := jsonFields(t)
		for _, key := range sortedKeys(obj) {
			f, known := fields[key]
			if !known {
				return shapeError(field(key), "unknown field")
			}
			if err := checkShape(field(key), obj[key], f.Type); err != nil {
				return err
			}
		}
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			return shapeError(path, "want an array")
		}
		for i, e := range arr {
			elem := fmt.Sprintf("%s[%d]", path, i)
			if e == nil { // a field may be null ("not reported"), but a list entry has nothing to stand for
				return shapeError(elem, "null, want a value")
			}
			if err := checkShape(elem, e, t.Elem()); err != nil {
				return err
			}
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return shapeError(path, "want an object")
		}
		for _, key := range sortedKeys(obj) {
			if err := checkShape(fmt.Sprintf("%s[%q]", path, key), obj[key], t.Elem()); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return shapeError(path, "want a string")
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return shapeError(path, "want true or false")
		}
	case reflect.Float64:
		num, ok := v.(json.Number)
		if !ok {
			return shapeError(path, "want a number")
		}
		if f, err := num.Float64(); err != nil || math.IsInf(f, 0) {
			return shapeError(path, "want a number, got "+string(num))
		}
	case reflect.Int, reflect.Int64, reflect.Uint32, reflect.Uint64:
		num, ok := v.(json.Number)
		if !ok {
			return shapeError(path, "want a number")
		}
		var err error
		if t.Kind() == reflect.Int || t.Kind() == reflect.Int64 {
			_, err = strconv.ParseInt(string(num), 10, t.Bits())
		} else {
			_, err = strconv.ParseUint(string(num), 10, t.Bits())
		}
		if err != nil {
			return shapeError(path, fmt.Sprintf("want a whole number that fits %s, got %s", t.Kind(), num))
		}
	default:
		return shapeError(path, "unexpected value") // no fixture field has another kind
	}
	return nil
}

func shapeError(path, problem string) error {
	if path == "" {
		path = "top level"
	}
	return fmt.Errorf("%s: %s", path, problem)
}

// jsonFields maps the JSON names of a struct's fields to the fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// errorPathRE matches the fields of the fixture that take an error (what the
// reader records in Missing).
var errorPathRE = lazyregexp.New(`^(?:driver_version|nvml_version|cuda_driver_version|devices` +
	`|devices\[(\d+)\](?:\.(uuid|name|minor_number|pci_bus_id|memory|memory\.reserved|compute_processes|graphics_processes|mps_processes|process_utilization|utilization|mig_mode|mig_devices|accounting_mode|accounting|accounting\[pid \d+\])` +
	`|\.mig_devices\[(\d+)\]\.(gpu_instance_id|compute_instance_id|uuid|memory|memory\.reserved|compute_processes|graphics_processes|utilization))?)$`)

// check verifies what the shape cannot say, such as devices in index order,
// minor numbers and UUIDs that name one GPU each, PIDs, percentages, and
// errors naming real fields and real NVML error codes.
func (f *nvmlFixture) check(tree map[string]any) error {
	devices, _ := tree["devices"].([]any)
	if err := checkDevices("", f.Devices, devices); err != nil {
		return err
	}
	series, _ := tree["series"].([]any)
	for i, e := range f.Series {
		if e.At < 0 || i > 0 && e.At < f.Series[i-1].At {
			return fmt.Errorf("series[%d].at: %v, want seconds after the start, in order", i, e.At)
		}
		entry, _ := series[i].(map[string]any)
		raw, _ := entry["devices"].([]any)
		if err := checkDevices(fmt.Sprintf("series[%d].", i), e.Devices, raw); err != nil {
			return err
		}
	}
	return f.checkErrors()
}

// checkDevices checks one state's devices, with raw as the JSON has them.
// prefix places them in the fixture.
func checkDevices(prefix string, devices []snapshot.GPU, raw []any) error {
	byMinor := map[int]int{}   // minor number -> first device index with it
	byUUID := map[string]int{} // UUID -> first device index with it
	for i, g := range devices {
		if obj, _ := raw[i].(map[string]any); obj != nil && obj["index"] != nil && g.Index != i {
			return fmt.Errorf("%sdevices[%d].index: %d, want %d (devices are listed in index order)", prefix, i, g.Index, i)
		}
		path := prefix + snapshot.DeviceKey(i)
		// A minor number names /dev/nvidiaN and a UUID names the GPU in every
		// join, so a negative or shared one would pin processes on the wrong
		// GPU.
		if g.MinorNumber != nil {
			if *g.MinorNumber < 0 || *g.MinorNumber > maxMinor {
				return fmt.Errorf("%s.minor_number: %d is not a device minor number", path, *g.MinorNumber)
			}
			if j, dup := byMinor[*g.MinorNumber]; dup {
				return fmt.Errorf("%s.minor_number: %d is also devices[%d]'s", path, *g.MinorNumber, j)
			}
			byMinor[*g.MinorNumber] = i
		}
		if g.UUID != "" {
			if j, dup := byUUID[g.UUID]; dup {
				return fmt.Errorf("%s.uuid: %q is also devices[%d]'s", path, g.UUID, j)
			}
			byUUID[g.UUID] = i
		}
		if len(g.MIGDevices) > 0 && (g.MIGMode == nil || *g.MIGMode != nvml.DEVICE_MIG_ENABLE) {
			return fmt.Errorf("%s.mig_devices: listed, but mig_mode is not 1 (enabled)", path)
		}
		lists := map[string][]snapshot.GPUProcess{}
		for _, l := range g.ProcessLists() {
			lists[l.Field] = l.Processes
		}
		for j := range g.MIGDevices {
			for _, l := range g.MIGDevices[j].ProcessLists() {
				lists[fmt.Sprintf("mig_devices[%d].%s", j, l.Field)] = l.Processes
			}
		}
		for _, name := range sortedKeys(lists) {
			seen := map[int]int{}
			for k, p := range lists[name] {
				if p.PID <= 0 || p.PID >= maxPID {
					return fmt.Errorf("%s.%s[%d].pid: %d is not a PID", path, name, k, p.PID)
				}
				if j, dup := seen[p.PID]; dup {
					return fmt.Errorf("%s.%s[%d].pid: %d is also [%d]'s (NVML lists a process once)", path, name, k, p.PID, j)
				}
				seen[p.PID] = k
			}
		}
		utils := map[string]*snapshot.Utilization{path + ".utilization": g.Utilization}
		for j, m := range g.MIGDevices {
			utils[fmt.Sprintf("%s.mig_devices[%d].utilization", path, j)] = m.Utilization
		}
		for _, name := range sortedKeys(utils) {
			if u := utils[name]; u != nil && (u.GPU > 100 || u.Memory > 100) {
				return fmt.Errorf("%s: gpu %d, memory %d, want percentages (0 to 100)", name, u.GPU, u.Memory)
			}
		}
		mems := map[string]*snapshot.Memory{path + ".memory": g.Memory}
		for j, m := range g.MIGDevices {
			mems[fmt.Sprintf("%s.mig_devices[%d].memory", path, j)] = m.Memory
		}
		for _, name := range sortedKeys(mems) {
			if m := mems[name]; m != nil && m.Used > m.Total {
				return fmt.Errorf("%s.used: %d, more than total %d", name, m.Used, m.Total)
			}
		}
		switch g.AccountingMode {
		case "", snapshot.AccountingEnabled, snapshot.AccountingDisabled:
		default:
			return fmt.Errorf("%s.accounting_mode: %q, want %q or %q", path, g.AccountingMode, snapshot.AccountingEnabled, snapshot.AccountingDisabled)
		}
		if len(g.Accounting) > 0 && g.AccountingMode != snapshot.AccountingEnabled {
			return fmt.Errorf("%s.accounting: listed, but accounting_mode is not %q", path, snapshot.AccountingEnabled)
		}
		seenPID := map[int]bool{}
		for k, a := range g.Accounting {
			if a.PID <= 0 || a.PID > maxPID || seenPID[a.PID] {
				return fmt.Errorf("%s.accounting[%d].pid: %d is not a PID, or is listed twice", path, k, a.PID)
			}
			seenPID[a.PID] = true
			for _, pct := range []struct {
				name  string
				value *uint32
			}{{"gpu_utilization", a.GPUUtilization}, {"memory_utilization", a.MemoryUtilization}} {
				if pct.value != nil && *pct.value > 100 {
					return fmt.Errorf("%s.accounting[%d].%s: %d, want a percentage (0 to 100)", path, k, pct.name, *pct.value)
				}
			}
		}
		for k, u := range g.ProcessUtilization {
			if u.PID <= 0 || u.PID >= maxPID {
				return fmt.Errorf("%s.process_utilization[%d].pid: %d is not a PID", path, k, u.PID)
			}
			for _, pct := range []struct {
				name  string
				value uint32
			}{{"sm_util", u.SMUtil}, {"mem_util", u.MemUtil}, {"enc_util", u.EncUtil}, {"dec_util", u.DecUtil}} {
				if pct.value > 100 {
					return fmt.Errorf("%s.process_utilization[%d].%s: %d, want a percentage (0 to 100)", path, k, pct.name, pct.value)
				}
			}
		}
	}
	return nil
}

// checkErrors checks that each error names a field that can fail, of a
// device listed, and a real NVML error code.
func (f *nvmlFixture) checkErrors() error {
	for _, key := range sortedKeys(f.Errors) {
		m := errorPathRE().FindStringSubmatch(key)
		if m == nil {
			return fmt.Errorf("errors[%q]: not a field that can fail", key)
		}
		if m[1] != "" {
			i, _ := strconv.Atoi(m[1])
			if i >= len(f.Devices) {
				return fmt.Errorf("errors[%q]: there is no devices[%d]", key, i)
			}
			if m[3] != "" {
				if j, _ := strconv.Atoi(m[3]); j >= len(f.Devices[i].MIGDevices) {
					return fmt.Errorf("errors[%q]: there is no devices[%d].mig_devices[%d]", key, i, j)
				}
			}
		}
		if _, ok := nvmlCodeByName(f.Errors[key]); !ok {
			return fmt.Errorf("errors[%q]: %q is not an NVML error (want a name such as ERROR_NOT_SUPPORTED)", key, f.Errors[key])
		}
	}
	return nil
}

// maxPID is the kernel's largest pid_max (PID_MAX_LIMIT), which every PID is below.
const maxPID = 1 << 22

// maxMinor is the largest device minor number (the kernel's MINORBITS, 20).
const maxMinor = 1<<20 - 1

// checkDuplicateKeys refuses an object that names a key twice. A decoder
// keeps the last, and a fixture that says two things of one field says
// nothing a replay could trust.
func checkDuplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	type object struct {
		keys map[string]bool
		key  bool // the next string token is a key
	}
	var stack []*object
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *object
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, &object{keys: map[string]bool{}, key: true})
				continue
			case '[':
				stack = append(stack, nil)
				continue
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			if top != nil && top.key {
				if top.keys[t] {
					return fmt.Errorf("key %q given twice in one object", t)
				}
				top.keys[t] = true
				top.key = false
				continue
			}
		}
		// After a value in an object, a key comes next.
		if len(stack) > 0 && stack[len(stack)-1] != nil {
			stack[len(stack)-1].key = true
		}
	}
}

func nvmlCodeByName(name string) (nvml.Return, bool) {
	for _, c := range nvmlCodes {
		if c.name == name {
			return c.ret, true
		}
	}
	return 0, false
}

func nvmlCodeByReason(reason string) (string, bool) {
	for _, c := range nvmlCodes {
		if c.reason == reason {
			return c.name, true
		}
	}
	return "", false
}
