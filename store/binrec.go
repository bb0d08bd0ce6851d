package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"
)

// The binary record codec (schema 2) stores a value's exported fields, as
// encoding/json sees them, in a length-prefixed form that decodes several
// times faster than JSON. A record's stored type descriptor is matched to
// today's type by field name, so any later gpusnap reads it.
//
// A record is a stranger's input, so every length, count, depth and
// allocation is bounded.

// wire is how a value is written.
type wire byte

const (
	wireBool   wire = 1 + iota // one byte, 0 or 1
	wireInt                    // zigzag varint
	wireUint                   // varint
	wireFloat                  // 8 bytes, IEEE 754, little endian
	wireString                 // varint length, then the bytes
	wireTime                   // zigzag varint Unix seconds, varint nanoseconds, zigzag varint zone offset in seconds
	wirePtr                    // byte 0 for nil, else 1 and the value
	wireSlice                  // varint 0 for nil, else count+1, then each element
	wireMap                    // varint 0 for nil, else count+1, then each key and value
	wireStruct                 // each field of the descriptor, in its order
)

// Bounds on a descriptor keep a stranger's store from making the reader
// recurse or allocate without limit.
const (
	maxDescDepth  = 16
	maxDescFields = 512
	maxDescName   = 128
	maxDescSize   = 64 << 10
)

// desc describes a stored value by its wire kind, the element of a pointer,
// slice or map (and a map's key), and a struct's fields in stored order.
type desc struct {
	wire   wire
	elem   *desc
	key    *desc
	fields []descField
}

type descField struct {
	name string
	desc *desc
}

var timeType = reflect.TypeFor[time.Time]()

var errUnsupported = errors.New("no binary form")

// jsonField is what encoding/json makes of a struct field, its name and
// whether it is one JSON writes at all (exported, not tagged "-").
func jsonField(f reflect.StructField) (name string, omitEmpty, ok bool) {
	if !f.IsExported() {
		return "", false, false
	}
	tag := f.Tag.Get("json")
	if tag == "-" {
		return "", false, false
	}
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" || f.Anonymous {
		name = f.Name
	}
	return name, strings.Contains(","+opts+",", ",omitempty,"), true
}

// describe builds the descriptor of type t. A kind JSON writes that the
// codec has no form for (an interface, an array, a complex number) is
// errUnsupported, and such a record is stored as JSON.
func describe(t reflect.Type, depth int) (*desc, error) {
	if depth > maxDescDepth {
		return nil, fmt.Errorf("%w: %s nests too deep", errUnsupported, t)
	}
	if t == timeType {
		return &desc{wire: wireTime}, nil
	}
	switch t.Kind() {
	case reflect.Bool:
		return &desc{wire: wireBool}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &desc{wire: wireInt}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return &desc{wire: wireUint}, nil
	case reflect.Float32, reflect.Float64:
		return &desc{wire: wireFloat}, nil
	case reflect.String:
		return &desc{wire: wireString}, nil
	case reflect.Pointer, reflect.Slice:
		elem, err := describe(t.Elem(), depth+1)
		if err != nil {
			return nil, err
		}
		w := wirePtr
		if t.Kind() == reflect.Slice {
			w = wireSlice
		}
		return &desc{wire: w, elem: elem}, nil
	case reflect.Map:
		key, err := describe(t.Key(), depth+1)
		if err != nil {
			return nil, err
		}
		if key.wire != wireString && key.wire != wireInt && key.wire != wireUint {
			return nil, fmt.Errorf("%w: map key %s", errUnsupported, t.Key())
		}
		elem, err := describe(t.Elem(), depth+1)
		if err != nil {
			return nil, err
		}
		return &desc{wire: wireMap, key: key, elem: elem}, nil
	case reflect.Struct:
		return describeStruct(t, depth)
	}
	return nil, fmt.Errorf("%w: %s", errUnsupported, t)
}

func describeStruct(t reflect.Type, depth int) (*desc, error) {
	d := &desc{wire: wireStruct}
	seen := map[string]bool{}
	for i := range t.NumField() {
		name, _, ok := jsonField(t.Field(i))
		if !ok {
			continue
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: %s has two fields named %s", errUnsupported, t, name)
		}
		seen[name] = true
		fd, err := describe(t.Field(i).Type, depth+1)
		if err != nil {
			return nil, err
		}
		d.fields = append(d.fields, descField{name, fd})
	}
	return d, nil
}

// marshal writes the descriptor as the wire byte, then a pointer's, slice's
// or map's element (a map's key first), or a struct's field count and each
// field's name and descriptor.
func (d *desc) marshal(out []byte) []byte {
	out = append(out, byte(d.wire))
	switch d.wire {
	case wirePtr, wireSlice:
		out = d.elem.marshal(out)
	case wireMap:
		out = d.elem.marshal(d.key.marshal(out))
	case wireStruct:
		out = binary.AppendUvarint(out, uint64(len(d.fields)))
		for _, f := range d.fields {
			out = binary.AppendUvarint(out, uint64(len(f.name)))
			out = append(out, f.name...)
			out = f.desc.marshal(out)
		}
	}
	return out
}

var errBadDesc = errors.New("malformed record type")

// parseDesc reads a stored descriptor, which must use every byte.
func parseDesc(b []byte) (*desc, error) {
	if len(b) > maxDescSize {
		return nil, fmt.Errorf("%w: %d bytes", errBadDesc, len(b))
	}
	r := &reader{b: b, s: string(b)}
	fields := 0
	d, err := r.desc(0, &fields)
	if err == nil && r.pos != len(b) {
		err = fmt.Errorf("%w: %d bytes after it", errBadDesc, len(b)-r.pos)
	}
	return d, err
}

func (r *reader) desc(depth int, fields *int) (*desc, error) {
	if depth > maxDescDepth {
		return nil, fmt.Errorf("%w: nested past %d levels", errBadDesc, maxDescDepth)
	}
	w, err := r.byte()
	if err != nil {
		return nil, errBadDesc
	}
	d := &desc{wire: wire(w)}
	switch d.wire {
	case wireBool, wireInt, wireUint, wireFloat, wireString, wireTime:
	case wirePtr, wireSlice:
		d.elem, err = r.desc(depth+1, fields)
	case wireMap:
		if d.key, err = r.desc(depth+1, fields); err == nil {
			if k := d.key.wire; k != wireString && k != wireInt && k != wireUint {
				return nil, fmt.Errorf("%w: map key of kind %d", errBadDesc, k)
			}
			d.elem, err = r.desc(depth+1, fields)
		}
	case wireStruct:
		err = r.descFields(d, depth, fields)
	default:
		return nil, fmt.Errorf("%w: kind %d", errBadDesc, w)
	}
	return d, err
}

func (r *reader) descFields(d *desc, depth int, fields *int) error {
	n, err := r.uvarint()
	if err != nil || n > maxDescFields || uint64(*fields)+n > maxDescFields {
		return fmt.Errorf("%w: more than %d fields", errBadDesc, maxDescFields)
	}
	*fields += int(n)
	d.fields = make([]descField, n)
	for i := range d.fields {
		name, err := r.string()
		if err != nil || len(name) > maxDescName {
			return fmt.Errorf("%w: field name", errBadDesc)
		}
		if d.fields[i].desc, err = r.desc(depth+1, fields); err != nil {
			return err
		}
		d.fields[i].name = name
	}
	return nil
}

// minSize is the fewest bytes a value of d takes, so that a count of
// elements is checked against the bytes left before anything is allocated
// for them.
func (d *desc) minSize() int {
	switch d.wire {
	case wireFloat:
		return 8
	case wireTime:
		return 3
	case wireStruct:
		n := 0
		for _, f := range d.fields {
			n += f.desc.minSize()
		}
		return n
	}
	return 1
}

// reader reads a record. b and s are the same bytes, s one copy that the
// decoded strings share (one allocation a record, not one a string).
type reader struct {
	b   []byte
	s   string
	pos int
	// budget is what the decode may still allocate, in bytes.
	budget int
	// lists, when not nil, holds the last list decoded of each slice
	// field (by its descriptor), with the bytes it was decoded from.
	lists map[*desc]sharedList
}

// sharedList is a decoded list and the bytes it was decoded from.
type sharedList struct {
	enc []byte
	val sliceHeader
}

var errShort = errors.New("record ends early")

func (r *reader) byte() (byte, error) {
	if r.pos >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.pos]
	r.pos++
	return c, nil
}

// uvarint and varint take one-byte values, most of a record's lengths and
// numbers, without a call.
func (r *reader) uvarint() (uint64, error) {
	if r.pos < len(r.b) && r.b[r.pos] < 0x80 {
		r.pos++
		return uint64(r.b[r.pos-1]), nil
	}
	v, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 {
		return 0, errShort
	}
	r.pos += n
	return v, nil
}

func (r *reader) varint() (int64, error) {
	if r.pos < len(r.b) && r.b[r.pos] < 0x80 {
		u := int64(r.b[r.pos])
		r.pos++
		return u>>1 ^ -(u & 1), nil
	}
	v, n := binary.Varint(r.b[r.pos:])
	if n <= 0 {
		return 0, errShort
	}
	r.pos += n
	return v, nil
}

func (r *reader) string() (string, error) {
	n, err := r.uvarint()
	if err != nil || n > uint64(len(r.b)-r.pos) {
		return "", errShort
	}
	s := r.s[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return s, nil
}

// count reads a slice's or map's count+1 (0 for nil) and checks that its
// elements fit in the bytes left and the allocation budget.
func (r *reader) count(elem *desc, goSize uintptr) (n int, isNil bool, err error) {
	c, err := r.uvarint()
	if err != nil {
		return 0, false, err
	}
	if c == 0 {
		return 0, true, nil
	}
	c--
	left := uint64(len(r.b) - r.pos)
	if min := uint64(elem.minSize()); (min == 0 && c > 0) || (min > 0 && c > left/min) {
		return 0, false, fmt.Errorf("%d elements in %d bytes", c, left)
	}
	if err := r.spend(c * uint64(max(goSize, 1))); err != nil {
		return 0, false, err
	}
	return int(c), false, nil
}

// spend takes n bytes from the allocation budget.
func (r *reader) spend(n uint64) error {
	if n > uint64(r.budget) {
		return errors.New("decodes past its allocation budget")
	}
	r.budget -= int(n)
	return nil
}

// skip reads past a value of d, a field the type no longer has.
func (r *reader) skip(d *desc) error {
	var err error
	switch d.wire {
	case wireBool:
		_, err = r.byte()
	case wireInt:
		_, err = r.varint()
	case wireUint:
		_, err = r.uvarint()
	case wireFloat:
		if len(r.b)-r.pos < 8 {
			return errShort
		}
		r.pos += 8
	case wireString:
		_, err = r.string()
	case wireTime:
		_, _, _, err = r.time()
	case wirePtr:
		var c byte
		if c, err = r.byte(); err == nil && c == 1 {
			err = r.skip(d.elem)
		}
	case wireSlice, wireMap:
		err = r.skipElems(d)
	case wireStruct:
		for _, f := range d.fields {
			if err = r.skip(f.desc); err != nil {
				break
			}
		}
	}
	return err
}

func (r *reader) skipElems(d *desc) error {
	n, _, err := r.count(d.elem, 0)
	for range n {
		if err != nil {
			break
		}
		if d.wire == wireMap {
			if err = r.skip(d.key); err != nil {
				break
			}
		}
		err = r.skip(d.elem)
	}
	return err
}

// maxZoneOffset bounds a stored zone offset, as RFC 3339 writes at most 99:59.
const maxZoneOffset = 99*3600 + 59*60

// time reads an instant and its zone offset.
func (r *reader) time() (sec, nsec int64, offset int, err error) {
	if sec, err = r.varint(); err != nil {
		return 0, 0, 0, err
	}
	ns, err := r.uvarint()
	if err != nil || ns >= 1e9 {
		return 0, 0, 0, errors.New("bad time")
	}
	off, err := r.varint()
	if err != nil || off < -maxZoneOffset || off > maxZoneOffset {
		return 0, 0, 0, errors.New("bad time zone offset")
	}
	return sec, int64(ns), int(off), nil
}

// timeOf rebuilds the time.Time that encoding/json reads back from the
// instant's RFC 3339 text. That is UTC for offset 0, the local zone when it
// has that offset at that instant, else a fixed zone without a name.
func timeOf(sec, nsec int64, offset int) time.Time {
	t := time.Unix(sec, nsec)
	if offset == 0 {
		return t.UTC()
	}
	if _, off := t.In(time.Local).Zone(); off == offset {
		return t.In(time.Local)
	}
	return t.In(time.FixedZone("", offset))
}

// float reads 8 bytes as a float64.
func (r *reader) float() (float64, error) {
	if len(r.b)-r.pos < 8 {
		return 0, errShort
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(r.b[r.pos:]))
	r.pos += 8
	return v, nil
}
