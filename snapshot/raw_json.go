package snapshot

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// A Raw text is the kernel's bytes, byte for byte, in memory and in JSON.
// Valid UTF-8 is a JSON string, anything else the object `{"base64": ...}`
// of its exact bytes (a JSON string would carry each invalid byte as
// U+FFFD). Capture never rewrites these texts. The parsed fields beside
// them are made valid UTF-8 instead.

// rawText is one Raw text in JSON.
type rawText string

type base64Text struct {
	Base64 string `json:"base64"`
}

func (t rawText) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(t)) {
		return json.Marshal(string(t))
	}
	return json.Marshal(base64Text{base64.StdEncoding.EncodeToString([]byte(t))})
}

func (t *rawText) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '{' {
		var o base64Text
		if err := json.Unmarshal(b, &o); err != nil {
			return err
		}
		raw, err := base64.StdEncoding.DecodeString(o.Base64)
		if err != nil {
			return errors.New("raw text: base64: " + err.Error())
		}
		*t = rawText(raw)
		return nil
	}
	var s string
	err := json.Unmarshal(b, &s)
	*t = rawText(s)
	return err
}

// rawJSON is Raw as JSON writes it, field for field.
type rawJSON struct {
	Maps    rawText        `json:"maps"`
	Status  rawText        `json:"status,omitempty"`
	Cmdline rawText        `json:"cmdline,omitempty"`
	Cgroup  rawText        `json:"cgroup,omitempty"`
	Cuts    map[string]Cut `json:"cuts,omitempty"`
}

// MarshalJSON writes each text as rawText does.
func (r Raw) MarshalJSON() ([]byte, error) {
	return json.Marshal(rawJSON{rawText(r.Maps), rawText(r.Status), rawText(r.Cmdline), rawText(r.Cgroup), r.Cuts})
}

// UnmarshalJSON reads what MarshalJSON writes, and plain strings.
func (r *Raw) UnmarshalJSON(b []byte) error {
	var j rawJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Raw{Maps: string(j.Maps), Status: string(j.Status), Cmdline: string(j.Cmdline), Cgroup: string(j.Cgroup), Cuts: j.Cuts}
	return nil
}
