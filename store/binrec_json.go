package store

import (
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// A jsonWriter appends the JSON of a binary value as json.Marshal writes the
// value it decodes to, without decoding it. It reports whether the value is
// one omitempty leaves out and one omitzero leaves out. show --json writes
// every record, and decoding each one to marshal it again cost most of that
// command (docs/performance.md, show --json at 2x show). GetJSON still checks
// each result against the record's JSON hash and falls back to decoding and
// json.Marshal where they differ, so the writer makes output faster but never
// different.
type jsonWriter func(r *reader, out []byte) (_ []byte, empty, zero bool, err error)

var (
	errNoWriter   = errors.New("no direct JSON writer")
	marshalerType = reflect.TypeFor[json.Marshaler]()
	textType      = reflect.TypeFor[encoding.TextMarshaler]()
	isZeroerType  = reflect.TypeFor[interface{ IsZero() bool }]()
)

// writeJSON appends to dst the JSON of a whole binary payload, which must be
// used to its last byte.
func writeJSON(w jsonWriter, payload, dst []byte) ([]byte, error) {
	r := &reader{b: payload, s: unsafe.String(unsafe.SliceData(payload), len(payload)), budget: decodeBudget(len(payload))}
	out, _, _, err := w(r, slices.Grow(dst, 2*len(payload)+64))
	if err == nil && r.pos != len(payload) {
		err = fmt.Errorf("%d bytes after the record", len(payload)-r.pos)
	}
	return out, err
}

// compileJSONWriter builds the writer of stored descriptor d as type t. It
// is errNoWriter where the stored fields are not exactly the type's, or
// where JSON would write t in a way the writer does not (a byte slice, a
// non-string map key, an embedded struct, the string option), and the
// record is then decoded and marshalled.
func compileJSONWriter(d *desc, t reflect.Type) (jsonWriter, error) {
	if t == timeType {
		if d.wire != wireTime {
			return nil, errNoWriter
		}
		return writeTime, nil
	}
	// A pointer writes null or what its element writes, as JSON's
	// marshaler encoder does for a nil pointer.
	if t.Kind() != reflect.Pointer && (t.Implements(marshalerType) || reflect.PointerTo(t).Implements(marshalerType) ||
		t.Implements(textType) || reflect.PointerTo(t).Implements(textType)) {
		return marshalerWriter(d, t)
	}
	k := t.Kind()
	switch {
	case d.wire == wireBool && k == reflect.Bool:
		return writeBool, nil
	case d.wire == wireInt && isInt(k):
		return intWriter(t.Size()), nil
	case d.wire == wireUint && isUint(k):
		return uintWriter(t.Size()), nil
	case d.wire == wireFloat && (k == reflect.Float32 || k == reflect.Float64):
		return floatWriter(int(t.Size() * 8)), nil
	case d.wire == wireString && k == reflect.String:
		return writeStringValue, nil
	case d.wire == wirePtr && k == reflect.Pointer:
		return ptrWriter(d, t)
	case d.wire == wireSlice && k == reflect.Slice && t.Elem().Kind() != reflect.Uint8:
		return sliceWriter(d, t)
	case d.wire == wireMap && k == reflect.Map && t.Key().Kind() == reflect.String &&
		!reflect.PointerTo(t.Key()).Implements(textType):
		return mapWriter(d, t)
	case d.wire == wireStruct && k == reflect.Struct:
		return structWriter(d, t)
	}
	return nil, errNoWriter
}

func writeBool(r *reader, out []byte) ([]byte, bool, bool, error) {
	c, err := r.byte()
	if err != nil || c > 1 {
		return out, false, false, errors.New("bad bool")
	}
	if c == 1 {
		return append(out, "true"...), false, false, nil
	}
	return append(out, "false"...), true, true, nil
}

// intWriter and uintWriter refuse a number that does not fit the field, as
// the decoder does.
func intWriter(size uintptr) jsonWriter {
	bits := size * 8
	return func(r *reader, out []byte) ([]byte, bool, bool, error) {
		x, err := r.varint()
		if err == nil && bits < 64 && (x < -1<<(bits-1) || x >= 1<<(bits-1)) {
			err = fmt.Errorf("%d overflows a %d-bit integer", x, bits)
		}
		return strconv.AppendInt(out, x, 10), x == 0, x == 0, err
	}
}

func uintWriter(size uintptr) jsonWriter {
	bits := size * 8
	return func(r *reader, out []byte) ([]byte, bool, bool, error) {
		x, err := r.uvarint()
		if err == nil && bits < 64 && x >= 1<<bits {
			err = fmt.Errorf("%d overflows a %d-bit unsigned integer", x, bits)
		}
		return strconv.AppendUint(out, x, 10), x == 0, x == 0, err
	}
}

// floatWriter writes a float as encoding/json does: the shortest decimal,
// in exponent form only for very small and very large magnitudes.
func floatWriter(bits int) jsonWriter {
	return func(r *reader, out []byte) ([]byte, bool, bool, error) {
		f, err := r.float()
		if err != nil {
			return out, false, false, err
		}
		if bits == 32 {
			if float64(float32(f)) != f && !math.IsNaN(f) {
				return out, false, false, fmt.Errorf("%g overflows a float32", f)
			}
			f = float64(float32(f))
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return out, false, false, errors.New("unsupported float")
		}
		format := byte('f')
		if abs := math.Abs(f); abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) ||
			bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
			format = 'e'
		}
		out = strconv.AppendFloat(out, f, format, -1, bits)
		if n := len(out); format == 'e' && n >= 4 && out[n-4] == 'e' && out[n-3] == '-' && out[n-2] == '0' {
			out[n-2] = out[n-1]
			out = out[:n-1]
		}
		return out, f == 0, f == 0, nil
	}
}

func writeStringValue(r *reader, out []byte) ([]byte, bool, bool, error) {
	s, err := r.string()
	return appendJSONString(out, s), s == "", s == "", err
}

func writeTime(r *reader, out []byte) ([]byte, bool, bool, error) {
	sec, nsec, offset, err := r.time()
	if err != nil {
		return out, false, false, err
	}
	t := timeOf(sec, nsec, offset)
	b, err := t.MarshalJSON()
	return append(out, b...), false, t.IsZero(), err
}

// marshalerWriter decodes a value whose type writes its own JSON or text
// and writes what that method makes of it, as encoding/json does of an
// addressable value.
func marshalerWriter(d *desc, t reflect.Type) (jsonWriter, error) {
	dec, err := compileDecoder(d, t)
	if err != nil {
		return nil, err
	}
	return func(r *reader, out []byte) ([]byte, bool, bool, error) {
		v := reflect.New(t)
		if err := dec(r, v.UnsafePointer()); err != nil {
			return out, false, false, err
		}
		empty, zero := isEmptyValue(v.Elem()), isZeroValue(v)
		if m, ok := v.Interface().(json.Marshaler); ok {
			b, err := json.Marshal(m)
			return append(out, b...), empty, zero, err
		}
		b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		return appendJSONString(out, string(b)), empty, zero, err
	}, nil
}

// isEmptyValue is what omitempty leaves out.
func isEmptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		return v.Len() == 0
	case reflect.Struct:
		return false
	}
	return v.IsZero()
}

// isZeroValue is what omitzero leaves out of the value p points to: its
// IsZero method's answer where it has one, else Go's zero value.
func isZeroValue(p reflect.Value) bool {
	if z, ok := p.Interface().(interface{ IsZero() bool }); ok {
		return z.IsZero()
	}
	return p.Elem().IsZero()
}

func ptrWriter(d *desc, t reflect.Type) (jsonWriter, error) {
	elem, err := compileJSONWriter(d.elem, t.Elem())
	if err != nil {
		return nil, err
	}
	size := uint64(max(t.Elem().Size(), 1))
	return func(r *reader, out []byte) ([]byte, bool, bool, error) {
		c, err := r.byte()
		if err != nil || c > 1 {
			return out, false, false, errors.New("bad pointer")
		}
		if c == 0 {
			return append(out, "null"...), true, true, nil
		}
		if err := r.spend(size); err != nil {
			return out, false, false, err
		}
		out, _, _, err = elem(r, out)
		return out, false, false, err
	}, nil
}

func sliceWriter(d *desc, t reflect.Type) (jsonWriter, error) {
	elem, err := compileJSONWriter(d.elem, t.Elem())
	if err != nil {
		return nil, err
	}
	return func(r *reader, out []byte) ([]byte, bool, bool, error) {
		n, isNil, err := r.count(d.elem, t.Elem().Size())
		if err != nil || isNil {
			return append(out, "null"...), true, true, err
		}
		out = append(out, '[')
		for i := range n {
			if i > 0 {
				out = append(out, ',')
			}
			if out, _, _, err = elem(r, out); err != nil {
				return out, false, false, err
			}
		}
		return append(out, ']'), n == 0, false, nil
	}, nil
}

// mapWriter writes a map of string keys, stored in the order of their
// bytes, which is the order encoding/json sorts them in. Keys out of that
// order, or one twice, are an error, and the record is decoded instead.
func mapWriter(d *desc, t reflect.Type) (jsonWriter, error) {
	if d.key.wire != wireString {
		return nil, errNoWriter
	}
	elem, err := compileJSONWriter(d.elem, t.Elem())
	if err != nil {
		return nil, err
	}
	pair := &desc{wire: wireStruct, fields: []descField{{desc: d.key}, {desc: d.elem}}}
	return func(r *reader, out []byte) ([]byte, bool, bool, error) {
		n, isNil, err := r.count(pair, t.Key().Size()+t.Elem().Size())
		if err != nil || isNil {
			return append(out, "null"...), true, true, err
		}
		out = append(out, '{')
		last := ""
		for i := range n {
			if i > 0 {
				out = append(out, ',')
			}
			k, err := r.string()
			if err == nil && i > 0 && k <= last {
				err = errors.New("map keys out of order")
			}
			if err != nil {
				return out, false, false, err
			}
			last = k
			out = append(appendJSONString(out, k), ':')
			if out, _, _, err = elem(r, out); err != nil {
				return out, false, false, err
			}
		}
		return append(out, '}'), n == 0, false, nil
	}, nil
}

// structWriter writes a struct whose stored fields are the fields JSON
// writes of t, in t's order, as json.Marshal does.
func structWriter(d *desc, t reflect.Type) (jsonWriter, error) {
	type fieldWriter struct {
		key             []byte // the quoted name and its colon
		omitEmpty, zero bool
		w               jsonWriter
	}
	var fields []fieldWriter
	for i := range t.NumField() {
		f := t.Field(i)
		name, omitEmpty, ok := jsonField(f)
		if !ok {
			continue
		}
		_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		opts = "," + opts + ","
		k := len(fields)
		if f.Anonymous || strings.Contains(opts, ",string,") || k >= len(d.fields) || d.fields[k].name != name {
			return nil, errNoWriter
		}
		omitZero := strings.Contains(opts, ",omitzero,")
		if omitZero && f.Type.Kind() == reflect.Struct && !f.Type.Implements(isZeroerType) &&
			!f.Type.Implements(textType) && !f.Type.Implements(marshalerType) {
			return nil, errNoWriter // a plain struct's zero is not worked out here
		}
		w, err := compileJSONWriter(d.fields[k].desc, f.Type)
		if err != nil {
			return nil, err
		}
		fields = append(fields, fieldWriter{appendJSONString(nil, name), omitEmpty, omitZero, w})
		fields[k].key = append(fields[k].key, ':')
	}
	if len(fields) != len(d.fields) {
		return nil, errNoWriter
	}
	return func(r *reader, out []byte) ([]byte, bool, bool, error) {
		next := byte('{')
		for _, f := range fields {
			mark := len(out)
			out = append(append(out, next), f.key...)
			var empty, zero bool
			var err error
			if out, empty, zero, err = f.w(r, out); err != nil {
				return out, false, false, err
			}
			if (f.omitEmpty && empty) || (f.zero && zero) {
				out = out[:mark]
				continue
			}
			next = ','
		}
		if next == '{' {
			return append(out, "{}"...), false, false, nil
		}
		return append(out, '}'), false, false, nil
	}, nil
}

// appendJSONString writes s quoted as encoding/json does with its default
// HTML escaping: <, > and & as \u00XX, invalid UTF-8 as U+FFFD, and the
// line and paragraph separators escaped.
func appendJSONString(out []byte, s string) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			out = append(out, s[start:i]...)
			switch b {
			case '\\', '"':
				out = append(out, '\\', b)
			case '\b':
				out = append(out, '\\', 'b')
			case '\f':
				out = append(out, '\\', 'f')
			case '\n':
				out = append(out, '\\', 'n')
			case '\r':
				out = append(out, '\\', 'r')
			case '\t':
				out = append(out, '\\', 't')
			default:
				out = append(out, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			out = append(append(out, s[start:i]...), `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			out = append(append(out, s[start:i]...), '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(append(out, s[start:]...), '"')
}
