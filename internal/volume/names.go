package volume

import (
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// maxName bounds a unit or volume name (a path component on every
// filesystem mariposa runs on is at most 255 bytes; the store adds
// suffixes such as ".restore-123456789" and ".aside").
const maxName = 200

// ValidUnit says whether unit can name a unit in the store and in the
// API: letters, digits, '-', '_' and '.', not starting with '.' (so never
// "." or "..", and never one of the store's own dot-directories), at most
// 200 bytes.
func ValidUnit(unit string) error {
	if err := validName(unit); err != nil {
		return fmt.Errorf("unit name %q: %w", unit, err)
	}
	return nil
}

// ValidVolume says whether path can name a volume of a slot: one name with
// the characters of ValidUnit (no '/': a volume is one directory of the
// slot), which does not end in ".aside" nor contain ".restore-" (the
// store's names for a swap in progress).
func ValidVolume(path string) error {
	err := validName(path)
	if err == nil && (strings.HasSuffix(path, asideSuffix) || strings.Contains(path, restoreInfix)) {
		err = fmt.Errorf("the names ending in %q or containing %q are the store's own", asideSuffix, restoreInfix)
	}
	if err != nil {
		return fmt.Errorf("volume path %q: %w", path, err)
	}
	return nil
}

func validName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty")
	case len(s) > maxName:
		return fmt.Errorf("longer than %d bytes", maxName)
	case s[0] == '.':
		return fmt.Errorf("starts with '.'")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("has %q: only letters, digits, '-', '_' and '.' are allowed", string(rune(c)))
		}
	}
	return nil
}

func validSlot(unit string, k int, path string) error {
	if err := ValidUnit(unit); err != nil {
		return err
	}
	if k < 0 {
		return fmt.Errorf("slot %d: negative", k)
	}
	return ValidVolume(path)
}

// parseSlot parses a slot number as the API spells it: decimal, canonical
// (no sign, no leading zero), so that one slot has one URL.
func parseSlot(s string) (int, error) {
	k, err := strconv.Atoi(s)
	if err != nil || k < 0 || strconv.Itoa(k) != s {
		return 0, fmt.Errorf("slot %q: not a slot number", s)
	}
	return k, nil
}

// validSHA256 accepts a SHA-256 as the store writes it: 64 lowercase hex
// digits.
func validSHA256(s string) error {
	if len(s) != 64 || strings.ToLower(s) != s {
		return fmt.Errorf("sha256 %q: not 64 lowercase hex digits", s)
	}
	if _, err := hex.DecodeString(s); err != nil {
		return fmt.Errorf("sha256 %q: not 64 lowercase hex digits", s)
	}
	return nil
}

func volumePrefix(base, unit string, k int, path string) string {
	return strings.TrimSuffix(base, "/") + "/v1/volumes/" + unit + "/" + strconv.Itoa(k) + "/" + path
}

// SnapshotURL is the URL of a volume's current snapshot on the node whose
// mariposa API is at base (e.g. "http://10.0.0.1:8500"): what the old
// holder publishes in handoffs/<unit>/<k> and the new holder's Source.URL.
func SnapshotURL(base, unit string, k int, path, sha256 string) string {
	return volumePrefix(base, unit, k, path) + "?sha256=" + url.QueryEscape(sha256)
}

// LatestCopyURL is the URL of the newest copy of a volume held by the node
// at base; with sha256, of the newest kept copy with that checksum (the one
// recorded in volumes/<unit>/<k>/<volume>/copies).
func LatestCopyURL(base, unit string, k int, path, sha256 string) string {
	u := volumePrefix(base, unit, k, path) + "/copies/latest"
	if sha256 != "" {
		u += "?sha256=" + url.QueryEscape(sha256)
	}
	return u
}
