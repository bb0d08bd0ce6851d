package ocsf

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// schemaDir holds the vendored OCSF schema (its README says which and from where).
const schemaDir = "testdata/ocsf-schema-1.8.0"

// attrDef is an attribute as the schema's files define it, in the
// dictionary and overridden by a class or object: a later definition's
// fields replace an earlier one's.
type attrDef map[string]any

// compiled is a class or object with its extends chain folded in.
type compiled struct {
	name        string
	attrs       map[string]attrDef
	constraints map[string][]string
	// profileOf names the profile of each attribute only a profile adds.
	profileOf map[string]string
}

// schema compiles the vendored files as the OCSF server does.
type schema struct {
	t       *testing.T
	dict    map[string]attrDef
	types   map[string]attrDef
	objects map[string]*compiled
}

func readJSON(t *testing.T, rel string, v any) {
	data, err := os.ReadFile(filepath.Join(schemaDir, rel))
	if err != nil {
		t.Fatalf("schema: %v", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("schema %s: %v", rel, err)
	}
}

func loadSchema(t *testing.T) *schema {
	var version struct{ Version string }
	readJSON(t, "version.json", &version)
	if version.Version != SchemaVersion {
		t.Fatalf("vendored schema is %s, the package writes %s", version.Version, SchemaVersion)
	}
	var dict struct {
		Attributes map[string]attrDef
		Types      struct{ Attributes map[string]attrDef }
	}
	readJSON(t, "dictionary.json", &dict)
	return &schema{t: t, dict: dict.Attributes, types: dict.Types.Attributes, objects: map[string]*compiled{}}
}

// rawDef is one schema file: a class or an object.
type rawDef struct {
	Name        string
	UID         *int
	Category    string
	Extends     string
	Attributes  map[string]json.RawMessage
	Constraints map[string][]string
}

// compile folds a file's extends chain: a child's attribute fields replace
// its parent's, a child's constraints (even empty) replace them whole.
// $include pulls in profiles: those vendored add their attributes, marked
// as the profile's, and the others are left out.
func (s *schema) compile(rel func(name string) string, name string) *compiled {
	var d rawDef
	readJSON(s.t, rel(name), &d)
	c := &compiled{name: name, attrs: map[string]attrDef{}, profileOf: map[string]string{}}
	if d.Extends != "" {
		p := s.compile(rel, d.Extends)
		for k, v := range p.attrs {
			c.attrs[k] = maps.Clone(v)
		}
		c.constraints = p.constraints
		maps.Copy(c.profileOf, p.profileOf)
	}
	if raw, ok := d.Attributes["$include"]; ok {
		s.include(c, raw)
	}
	if d.Constraints != nil {
		c.constraints = d.Constraints
	}
	for k, raw := range d.Attributes {
		if k == "$include" {
			continue
		}
		var a attrDef
		if err := json.Unmarshal(raw, &a); err != nil {
			s.t.Fatalf("schema %s.%s: %v", name, k, err)
		}
		if c.attrs[k] == nil {
			c.attrs[k] = attrDef{}
		}
		maps.Copy(c.attrs[k], a)
		delete(c.profileOf, k) // the class's own now
	}
	return c
}

// include adds to c the attributes of each profile of the list raw that is
// vendored, each marked as its profile's where c has no attribute so named.
func (s *schema) include(c *compiled, raw json.RawMessage) {
	var files []string
	if err := json.Unmarshal(raw, &files); err != nil {
		s.t.Fatalf("schema %s.$include: %v", c.name, err)
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(schemaDir, f)); err != nil {
			continue
		}
		var p rawDef
		readJSON(s.t, f, &p)
		for k, raw := range p.Attributes {
			var a attrDef
			if err := json.Unmarshal(raw, &a); err != nil {
				s.t.Fatalf("schema %s.%s: %v", f, k, err)
			}
			if c.attrs[k] == nil {
				c.attrs[k], c.profileOf[k] = a, p.Name
			}
		}
	}
}

func (s *schema) object(name string) *compiled {
	if o := s.objects[name]; o != nil {
		return o
	}
	o := s.compile(func(n string) string { return "objects/" + n + ".json" }, name)
	s.objects[name] = o
	return o
}

// class compiles the Detection Finding and checks its uid: category 2
// (findings) times 1000 plus the class's own 4.
func (s *schema) class() (*compiled, int, int) {
	events := map[string]string{"base_event": "events/base_event.json", "finding": "events/findings/finding.json", "detection_finding": "events/findings/detection_finding.json"}
	c := s.compile(func(n string) string { return events[n] }, "detection_finding")
	var d rawDef
	readJSON(s.t, events["detection_finding"], &d)
	var cats struct{ Attributes map[string]struct{ UID int } }
	readJSON(s.t, "categories.json", &cats)
	var fin rawDef
	readJSON(s.t, events["finding"], &fin)
	cat := cats.Attributes[fin.Category].UID
	uid := cat*1000 + *d.UID
	// The server fills the class's own ids into the base event's
	// placeholder enums, with their captions for the siblings.
	caption := func(s string) map[string]any { return map[string]any{"caption": s} }
	c.attrs["category_uid"]["enum"] = map[string]any{strconv.Itoa(cat): caption("Findings")}
	c.attrs["class_uid"]["enum"] = map[string]any{strconv.Itoa(uid): caption("Detection Finding")}
	types := map[string]any{}
	for id, a := range s.def(c, "activity_id")["enum"].(map[string]any) {
		n, _ := strconv.Atoi(id)
		types[strconv.Itoa(uid*100+n)] = caption("Detection Finding: " + a.(map[string]any)["caption"].(string))
	}
	c.attrs["type_uid"]["enum"] = types
	return c, cat, uid
}

// def is an attribute's whole definition: the dictionary's, then the class's or object's.
func (s *schema) def(owner *compiled, name string) attrDef {
	d := maps.Clone(s.dict[name])
	if d == nil {
		d = attrDef{}
	}
	maps.Copy(d, owner.attrs[name])
	return d
}

// validate checks v, an object of type owner, and returns what is wrong, by path.
func (s *schema) validate(owner *compiled, v map[string]any, at string) []string {
	var errs []string
	for name, val := range v {
		if _, ok := owner.attrs[name]; !ok {
			errs = append(errs, fmt.Sprintf("%s.%s: not an attribute of %s", at, name, owner.name))
			continue
		}
		if p := owner.profileOf[name]; p != "" && !slices.Contains(profilesOf(v), p) {
			errs = append(errs, fmt.Sprintf("%s.%s: only profile %s adds it, and metadata.profiles does not name it", at, name, p))
		}
		d := s.def(owner, name)
		if dep, ok := d["@deprecated"]; ok {
			errs = append(errs, fmt.Sprintf("%s.%s: deprecated (%v)", at, name, dep))
		}
		if d["is_array"] == true {
			arr, ok := val.([]any)
			if !ok {
				errs = append(errs, fmt.Sprintf("%s.%s: want an array", at, name))
				continue
			}
			for i, e := range arr {
				errs = append(errs, s.value(d, e, fmt.Sprintf("%s.%s[%d]", at, name, i))...)
			}
			continue
		}
		errs = append(errs, s.value(d, val, at+"."+name)...)
		errs = append(errs, s.sibling(owner, d, v, name, at)...)
	}
	for name, a := range owner.attrs {
		if a["requirement"] == "required" || s.dict[name]["requirement"] == "required" && a["requirement"] == nil {
			if _, ok := v[name]; !ok {
				errs = append(errs, fmt.Sprintf("%s.%s: required by %s, missing", at, name, owner.name))
			}
		}
	}
	for kind, names := range owner.constraints {
		n := 0
		for _, name := range names {
			if _, ok := v[name]; ok {
				n++
			}
		}
		if (kind == "at_least_one" && n == 0) || (kind == "just_one" && n != 1) {
			errs = append(errs, fmt.Sprintf("%s: %s of %v (%s), has %d", at, kind, names, owner.name, n))
		}
	}
	return errs
}

// profilesOf is what a finding's metadata.profiles names.
func profilesOf(v map[string]any) []string {
	var out []string
	md, _ := v["metadata"].(map[string]any)
	list, _ := md["profiles"].([]any)
	for _, p := range list {
		if s, ok := p.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// sibling checks an enum's name beside its id: severity beside severity_id
// holds the id's caption (any text for 99, Other).
func (s *schema) sibling(owner *compiled, d attrDef, v map[string]any, name, at string) []string {
	sib, _ := d["sibling"].(string)
	enum, _ := d["enum"].(map[string]any)
	text, ok := v[sib].(string)
	if sib == "" || enum == nil || !ok {
		return nil
	}
	id := fmt.Sprint(v[name])
	e, _ := enum[id].(map[string]any)
	if id != "99" && e != nil && e["caption"] != text {
		return []string{fmt.Sprintf("%s.%s: %q, want %q for %s %s", at, sib, text, e["caption"], name, id)}
	}
	return nil
}

// value checks one value against its attribute's type and enum.
func (s *schema) value(d attrDef, val any, at string) []string {
	typ, _ := d["type"].(string)
	if !strings.HasSuffix(typ, "_t") {
		obj, ok := val.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object %s", at, typ)}
		}
		return s.validate(s.object(typ), obj, at)
	}
	if enum, ok := d["enum"].(map[string]any); ok {
		if _, ok := enum[fmt.Sprint(val)]; !ok {
			return []string{fmt.Sprintf("%s: %v is not in its enum %v", at, val, slices.Sorted(maps.Keys(enum)))}
		}
	}
	base, regex := typ, ""
	for s.types[base]["type"] != nil {
		if r, ok := s.types[base]["regex"].(string); ok && regex == "" {
			regex = r
		}
		base = s.types[base]["type"].(string)
	}
	ok := false
	switch base {
	case "string_t":
		str, isStr := val.(string)
		ok = isStr && (regex == "" || regexp.MustCompile(regex).MatchString(str))
	case "integer_t", "long_t":
		n, isNum := val.(float64)
		ok = isNum && n == math.Trunc(n) && (base == "long_t" || n == float64(int32(n)))
	case "float_t":
		_, ok = val.(float64)
	case "boolean_t":
		_, ok = val.(bool)
	case "json_t":
		ok = true
	default:
		return []string{fmt.Sprintf("%s: type %s is not known to the test", at, typ)}
	}
	if !ok {
		return []string{fmt.Sprintf("%s: %v is not a %s", at, val, typ)}
	}
	return nil
}

// validateLines validates each JSON line of out as a Detection Finding and
// returns the findings decoded.
func validateLines(t *testing.T, out []byte) []map[string]any {
	t.Helper()
	s := loadSchema(t)
	class, cat, uid := s.class()
	if uid != 2004 {
		t.Fatalf("the schema's Detection Finding is class %d", uid)
	}
	var all []map[string]any
	for i, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, line)
		}
		for _, e := range s.validate(class, v, "finding") {
			t.Errorf("line %d: %s", i+1, e)
		}
		act := int(v["activity_id"].(float64))
		if v["class_uid"] != float64(uid) || v["category_uid"] != float64(cat) || v["type_uid"] != float64(uid*100+act) {
			t.Errorf("line %d: class %v category %v type %v, want %d, %d, %d", i+1, v["class_uid"], v["category_uid"], v["type_uid"], uid, cat, uid*100+act)
		}
		all = append(all, v)
	}
	return all
}

// The validator itself rejects what the schema does not allow.
func TestSchemaValidatorRejects(t *testing.T) {
	s := loadSchema(t)
	class, _, _ := s.class()
	good := map[string]any{}
	data, err := json.Marshal(newFinding(Source{Host: "h", Version: "v", Command: "diff"}, "k", "m", 3, fixedTime, "1@2", "/dev/nvidia0", ""))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &good); err != nil {
		t.Fatal(err)
	}
	if errs := s.validate(class, good, "finding"); len(errs) > 0 {
		t.Fatalf("a finding as written: %v", errs)
	}
	for name, spoil := range map[string]func(map[string]any){
		"unknown attribute": func(v map[string]any) { v["gpu"] = "x" },
		"required missing":  func(v map[string]any) { delete(v, "finding_info") },
		"enum value":        func(v map[string]any) { v["severity_id"] = float64(7) },
		"sibling caption":   func(v map[string]any) { v["severity"] = "Severe" },
		"class name":        func(v map[string]any) { v["class_name"] = "Security Finding" },
		"type uid":          func(v map[string]any) { v["type_uid"] = float64(200101) },
		"wrong type":        func(v map[string]any) { v["time"] = "now" },
		"nested required":   func(v map[string]any) { delete(v["metadata"].(map[string]any), "product") },
		"profile attribute": func(v map[string]any) { v["actor"] = map[string]any{} },
		"profile not named": func(v map[string]any) { v["disposition_id"], v["disposition"] = float64(19), "Alert" },
		"disposition enum": func(v map[string]any) {
			v["metadata"].(map[string]any)["profiles"] = []any{"security_control"}
			v["disposition_id"], v["disposition"] = float64(77), "Alert"
		},
		"at_least_one":          func(v map[string]any) { v["evidences"] = []any{map[string]any{}} },
		"deprecated (1.8.0 on)": func(v map[string]any) { v["finding_info"].(map[string]any)["product_uid"] = "x" },
	} {
		var v map[string]any
		_ = json.Unmarshal(data, &v)
		spoil(v)
		if errs := s.validate(class, v, "finding"); len(errs) == 0 {
			t.Errorf("%s: accepted", name)
		}
	}
}
