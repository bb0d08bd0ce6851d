package bundle

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The bundle is a BagIt bag (RFC 8493, version 1.0). Its base directory
// holds bagit.txt, bag-info.txt, the payload under data/, and a payload
// manifest and a tag manifest of SHA-256 hashes, which sha256sum -c reads.

// Tag file names at the bag's base.
const (
	FileBagIt       = "bagit.txt"
	FileBagInfo     = "bag-info.txt"
	FileManifest    = "manifest-sha256.txt"
	FileTagManifest = "tagmanifest-sha256.txt"
	// FileEnvelope is the DSSE envelope of a signed bundle's statement,
	// FileStatement an unsigned bundle's statement itself.
	FileEnvelope  = "statement.dsse.json"
	FileStatement = "statement.intoto.json"
	DirPayload    = "data"
)

// bagitTxt is bagit.txt, the version and the tag files' encoding.
const bagitTxt = "BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n"

// encodePath percent-encodes a manifest path as RFC 8493 §2.1.3 has it,
// escaping CR, LF and % only.
func encodePath(p string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(p)
}

// decodePath undoes encodePath. Any other escape is left as it stands.
func decodePath(p string) string {
	return strings.NewReplacer("%25", "%", "%0D", "\r", "%0A", "\n", "%0d", "\r", "%0a", "\n").Replace(p)
}

// manifestText renders a manifest, one "HEX  PATH" line per file, sorted.
func manifestText(files map[string][]byte) []byte {
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var b bytes.Buffer
	for _, name := range names {
		fmt.Fprintf(&b, "%s  %s\n", sha256Hex(files[name]), encodePath(name))
	}
	return b.Bytes()
}

// parseManifest reads a manifest into path -> hex SHA-256. A line that is
// not "HEX  PATH", or a path listed twice, is an error.
func parseManifest(text []byte) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(strings.TrimSuffix(string(text), "\n"), "\n") {
		if line == "" && len(text) == 0 {
			break
		}
		hash, name, ok := strings.Cut(line, "  ")
		if !ok || len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" || name == "" {
			return nil, fmt.Errorf("line %d is not \"SHA256  PATH\"", i+1)
		}
		name = decodePath(name)
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("line %d lists %s again", i+1, strconv.Quote(name))
		}
		out[name] = hash
	}
	return out, nil
}

// bagInfo is bag-info.txt. It says who made the bag and when, and gives the
// Payload-Oxum (payload octets and file count) that lets a validator spot a
// missing or truncated file before hashing.
func bagInfo(version, date, external string, payload map[string][]byte) []byte {
	octets := 0
	for _, b := range payload {
		octets += len(b)
	}
	return fmt.Appendf(nil, "Source-Organization: gpusnap\nBagging-Date: %s\nPayload-Oxum: %d.%d\nExternal-Identifier: %s\nBag-Software-Agent: gpusnap %s\n",
		date, octets, len(payload), oneLine(external), oneLine(version))
}

// oneLine keeps a tag value on its line, so that a tenant-controlled byte
// cannot start a new tag.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// payloadOxum reads bag-info.txt's Payload-Oxum.
func payloadOxum(info []byte) (octets, count int64, ok bool) {
	for _, line := range strings.Split(string(info), "\n") {
		if v, found := strings.CutPrefix(line, "Payload-Oxum: "); found {
			o, c, _ := strings.Cut(v, ".")
			var err1, err2 error
			octets, err1 = strconv.ParseInt(o, 10, 64)
			count, err2 = strconv.ParseInt(c, 10, 64)
			return octets, count, err1 == nil && err2 == nil
		}
	}
	return 0, 0, false
}
