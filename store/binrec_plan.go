package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"
	"unsafe"
)

// An encoder appends the binary form of v, whose type built it.
type encoder func(out []byte, v reflect.Value) []byte

// compileEncoder builds the encoder of type t, whose descriptor is d
// (describe of t). A slice or map that JSON omits when empty is written as
// nil, so that it reads back as JSON reads it, absent and nil.
func compileEncoder(t reflect.Type, d *desc) encoder {
	switch d.wire {
	case wireBool:
		return func(out []byte, v reflect.Value) []byte {
			if v.Bool() {
				return append(out, 1)
			}
			return append(out, 0)
		}
	case wireInt:
		return func(out []byte, v reflect.Value) []byte { return binary.AppendVarint(out, v.Int()) }
	case wireUint:
		return func(out []byte, v reflect.Value) []byte { return binary.AppendUvarint(out, v.Uint()) }
	case wireFloat:
		return func(out []byte, v reflect.Value) []byte {
			return binary.LittleEndian.AppendUint64(out, math.Float64bits(v.Float()))
		}
	case wireString:
		return func(out []byte, v reflect.Value) []byte {
			s := v.String()
			return append(binary.AppendUvarint(out, uint64(len(s))), s...)
		}
	case wireTime:
		return encodeTime
	case wirePtr:
		elem := compileEncoder(t.Elem(), d.elem)
		return func(out []byte, v reflect.Value) []byte {
			if v.IsNil() {
				return append(out, 0)
			}
			return elem(append(out, 1), v.Elem())
		}
	case wireSlice:
		return sliceEncoder(t, d, false)
	case wireMap:
		return mapEncoder(t, d, false)
	}
	return structEncoder(t, d)
}

func encodeTime(out []byte, v reflect.Value) []byte {
	t := v.Interface().(time.Time)
	_, offset := t.Zone()
	out = binary.AppendVarint(out, t.Unix())
	out = binary.AppendUvarint(out, uint64(t.Nanosecond()))
	return binary.AppendVarint(out, int64(offset))
}

func sliceEncoder(t reflect.Type, d *desc, emptyIsNil bool) encoder {
	elem := compileEncoder(t.Elem(), d.elem)
	return func(out []byte, v reflect.Value) []byte {
		if v.IsNil() || (emptyIsNil && v.Len() == 0) {
			return append(out, 0)
		}
		out = binary.AppendUvarint(out, uint64(v.Len())+1)
		for i := range v.Len() {
			out = elem(out, v.Index(i))
		}
		return out
	}
}

// mapEncoder writes a map's pairs in the order of their keys, so that the
// same value always has the same bytes and a stored record can be checked by
// comparing it with the encoding of the process it should hold.
func mapEncoder(t reflect.Type, d *desc, emptyIsNil bool) encoder {
	key, elem := compileEncoder(t.Key(), d.key), compileEncoder(t.Elem(), d.elem)
	return func(out []byte, v reflect.Value) []byte {
		if v.IsNil() || (emptyIsNil && v.Len() == 0) {
			return append(out, 0)
		}
		out = binary.AppendUvarint(out, uint64(v.Len())+1)
		keys := v.MapKeys()
		slices.SortFunc(keys, compareKeys)
		for _, k := range keys {
			out = elem(key(out, k), v.MapIndex(k))
		}
		return out
	}
}

func compareKeys(a, b reflect.Value) int {
	switch {
	case a.Kind() == reflect.String:
		return strings.Compare(a.String(), b.String())
	case isInt(a.Kind()):
		return cmp.Compare(a.Int(), b.Int())
	}
	return cmp.Compare(a.Uint(), b.Uint())
}

func structEncoder(t reflect.Type, d *desc) encoder {
	type fieldEnc struct {
		index int
		enc   encoder
	}
	var fields []fieldEnc
	k := 0
	for i := range t.NumField() {
		_, omitEmpty, ok := jsonField(t.Field(i))
		if !ok {
			continue
		}
		ft, fd := t.Field(i).Type, d.fields[k].desc
		k++
		enc := compileEncoder(ft, fd)
		switch {
		case omitEmpty && fd.wire == wireSlice:
			enc = sliceEncoder(ft, fd, true)
		case omitEmpty && fd.wire == wireMap:
			enc = mapEncoder(ft, fd, true)
		}
		fields = append(fields, fieldEnc{i, enc})
	}
	return func(out []byte, v reflect.Value) []byte {
		for _, f := range fields {
			out = f.enc(out, v.Field(f.index))
		}
		return out
	}
}

// A decoder reads a value into the zeroed memory at p, writing through unsafe
// pointers at offsets reflect computed. That made decoding ten times JSON's
// speed where reflect.Value.Set gave three (BenchmarkDecodeRecord). Every
// store is typed, so the garbage collector sees it.
type decoder func(r *reader, p unsafe.Pointer) error

// compileDecoder builds the decoder of stored descriptor d into type t. A
// kind that does not match is an error, as encoding/json's type errors are.
func compileDecoder(d *desc, t reflect.Type) (decoder, error) {
	k := t.Kind()
	switch {
	case t == timeType || d.wire == wireTime:
		if t != timeType || d.wire != wireTime {
			break
		}
		return decodeTime, nil
	case d.wire == wireBool && k == reflect.Bool:
		return decodeBool, nil
	case d.wire == wireInt && isInt(k):
		return intDecoder(t.Size()), nil
	case d.wire == wireUint && isUint(k):
		return uintDecoder(t.Size()), nil
	case d.wire == wireFloat && (k == reflect.Float32 || k == reflect.Float64):
		return floatDecoder(k), nil
	case d.wire == wireString && k == reflect.String:
		return decodeString, nil
	case d.wire == wirePtr && k == reflect.Pointer:
		return ptrDecoder(d, t)
	case d.wire == wireSlice && k == reflect.Slice:
		return sliceDecoder(d, t)
	case d.wire == wireMap && k == reflect.Map:
		return mapDecoder(d, t)
	case d.wire == wireStruct && k == reflect.Struct:
		return structDecoder(d, t)
	}
	return nil, fmt.Errorf("%w: a stored %s field is %s now", errBadDesc, wireName(d.wire), t)
}

func wireName(w wire) string {
	names := [...]string{"?", "bool", "int", "uint", "float", "string", "time", "pointer", "slice", "map", "struct"}
	if int(w) < len(names) {
		return names[w]
	}
	return "?"
}

func isInt(k reflect.Kind) bool {
	return k == reflect.Int || k == reflect.Int8 || k == reflect.Int16 || k == reflect.Int32 || k == reflect.Int64
}

func isUint(k reflect.Kind) bool {
	return k == reflect.Uint || k == reflect.Uint8 || k == reflect.Uint16 || k == reflect.Uint32 || k == reflect.Uint64
}

func decodeBool(r *reader, p unsafe.Pointer) error {
	c, err := r.byte()
	if err != nil || c > 1 {
		return errors.New("bad bool")
	}
	*(*bool)(p) = c == 1
	return nil
}

// intDecoder stores a signed integer of size bytes, refusing one that does
// not fit.
func intDecoder(size uintptr) decoder {
	bits := size * 8
	return func(r *reader, p unsafe.Pointer) error {
		x, err := r.varint()
		if err != nil {
			return err
		}
		if bits < 64 && (x < -1<<(bits-1) || x >= 1<<(bits-1)) {
			return fmt.Errorf("%d overflows a %d-bit integer", x, bits)
		}
		switch size {
		case 1:
			*(*int8)(p) = int8(x)
		case 2:
			*(*int16)(p) = int16(x)
		case 4:
			*(*int32)(p) = int32(x)
		default:
			*(*int64)(p) = x
		}
		return nil
	}
}

func uintDecoder(size uintptr) decoder {
	bits := size * 8
	return func(r *reader, p unsafe.Pointer) error {
		x, err := r.uvarint()
		if err != nil {
			return err
		}
		if bits < 64 && x >= 1<<bits {
			return fmt.Errorf("%d overflows a %d-bit unsigned integer", x, bits)
		}
		switch size {
		case 1:
			*(*uint8)(p) = uint8(x)
		case 2:
			*(*uint16)(p) = uint16(x)
		case 4:
			*(*uint32)(p) = uint32(x)
		default:
			*(*uint64)(p) = x
		}
		return nil
	}
}

func floatDecoder(k reflect.Kind) decoder {
	return func(r *reader, p unsafe.Pointer) error {
		x, err := r.float()
		if err != nil {
			return err
		}
		if k == reflect.Float64 {
			*(*float64)(p) = x
			return nil
		}
		if f := float32(x); float64(f) != x && !math.IsNaN(x) {
			return fmt.Errorf("%g overflows a float32", x)
		}
		*(*float32)(p) = float32(x)
		return nil
	}
}

func decodeString(r *reader, p unsafe.Pointer) error {
	s, err := r.string()
	*(*string)(p) = s
	return err
}

func decodeTime(r *reader, p unsafe.Pointer) error {
	sec, nsec, offset, err := r.time()
	if err != nil {
		return err
	}
	*(*time.Time)(p) = timeOf(sec, nsec, offset)
	return nil
}

func ptrDecoder(d *desc, t reflect.Type) (decoder, error) {
	elem, err := compileDecoder(d.elem, t.Elem())
	if err != nil {
		return nil, err
	}
	size := uint64(max(t.Elem().Size(), 1))
	return func(r *reader, p unsafe.Pointer) error {
		c, err := r.byte()
		if err != nil || c > 1 {
			return errors.New("bad pointer")
		}
		if c == 0 {
			return nil
		}
		if err := r.spend(size); err != nil {
			return err
		}
		q := reflect.New(t.Elem()).UnsafePointer()
		*(*unsafe.Pointer)(p) = q
		return elem(r, q)
	}, nil
}

func sliceDecoder(d *desc, t reflect.Type) (decoder, error) {
	elem, err := compileDecoder(d.elem, t.Elem())
	if err != nil {
		return nil, err
	}
	size := t.Elem().Size()
	alloc := func(n int) unsafe.Pointer { return reflect.MakeSlice(t, n, n).UnsafePointer() }
	// Lists of strings and of ints, most of a process's lists, are made
	// without reflect, since a []string has the layout of any list of a
	// string kind, and a []int64 of any list of an 8-byte integer kind.
	switch k := t.Elem().Kind(); {
	case k == reflect.String:
		alloc = func(n int) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(make([]string, n))) }
	case (isInt(k) || isUint(k)) && size == 8:
		alloc = func(n int) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(make([]int64, n))) }
	}
	decode := func(r *reader, p unsafe.Pointer) error {
		n, isNil, err := r.count(d.elem, size)
		if err != nil || isNil {
			return err
		}
		base := alloc(n)
		if base == nil { // an empty list, not nil, as JSON reads []
			base = unsafe.Pointer(&zeroElem)
		}
		*(*sliceHeader)(p) = sliceHeader{base, n, n}
		for i := range n {
			if err := elem(r, unsafe.Add(base, uintptr(i)*size)); err != nil {
				return err
			}
		}
		return nil
	}
	return func(r *reader, p unsafe.Pointer) error {
		if r.lists == nil {
			return decode(r, p)
		}
		// Neighbouring processes mostly hold the same lists (cgroup lines,
		// a command line, fds on /dev/null). Bytes that begin with the last
		// list's bytes hold that list and end where it did, so a decode
		// reads them in one way only.
		if last, ok := r.lists[d]; ok && bytes.HasPrefix(r.b[r.pos:], last.enc) {
			r.pos += len(last.enc)
			*(*sliceHeader)(p) = last.val
			return nil
		}
		start := r.pos
		if err := decode(r, p); err != nil {
			return err
		}
		r.lists[d] = sharedList{r.b[start:r.pos], *(*sliceHeader)(p)}
		return nil
	}, nil
}

// sliceHeader is the layout of every Go slice.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// zeroElem is where an empty, non-nil list points, as make of none does.
var zeroElem [0]byte

func mapDecoder(d *desc, t reflect.Type) (decoder, error) {
	key, err := compileDecoder(d.key, t.Key())
	if err != nil {
		return nil, err
	}
	elem, err := compileDecoder(d.elem, t.Elem())
	if err != nil {
		return nil, err
	}
	pair := &desc{wire: wireStruct, fields: []descField{{desc: d.key}, {desc: d.elem}}}
	return func(r *reader, p unsafe.Pointer) error {
		n, isNil, err := r.count(pair, t.Key().Size()+t.Elem().Size())
		if err != nil || isNil {
			return err
		}
		m := reflect.MakeMapWithSize(t, n)
		for range n {
			k, e := reflect.New(t.Key()), reflect.New(t.Elem())
			if err := key(r, k.UnsafePointer()); err != nil {
				return err
			}
			if err := elem(r, e.UnsafePointer()); err != nil {
				return err
			}
			m.SetMapIndex(k.Elem(), e.Elem())
		}
		reflect.NewAt(t, p).Elem().Set(m)
		return nil
	}, nil
}

func structDecoder(d *desc, t reflect.Type) (decoder, error) {
	byName := map[string]int{}
	for i := range t.NumField() {
		if name, _, ok := jsonField(t.Field(i)); ok {
			byName[name] = i
		}
	}
	type fieldDec struct {
		offset uintptr
		dec    decoder
		skip   *desc // a stored field the type no longer has
	}
	fields := make([]fieldDec, len(d.fields))
	for k, f := range d.fields {
		i, ok := byName[f.name]
		if !ok {
			fields[k] = fieldDec{skip: f.desc}
			continue
		}
		delete(byName, f.name) // a name stored twice fills the field once
		dec, err := compileDecoder(f.desc, t.Field(i).Type)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", f.name, err)
		}
		fields[k] = fieldDec{offset: t.Field(i).Offset, dec: dec}
	}
	return func(r *reader, p unsafe.Pointer) error {
		for _, f := range fields {
			var err error
			if f.skip != nil {
				err = r.skip(f.skip)
			} else {
				err = f.dec(r, unsafe.Add(p, f.offset))
			}
			if err != nil {
				return err
			}
		}
		return nil
	}, nil
}
