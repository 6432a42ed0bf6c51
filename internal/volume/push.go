package volume

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Peer is another node's mariposa API, for Push: its base URL (e.g.
// "http://10.0.0.2:8500"), the headers that prove the pusher holds the
// slot, and the client to use (nil: http.DefaultClient).
type Peer struct {
	URL    string
	Header http.Header
	Client *http.Client
}

// Push sends a volume's snapshot file (the last SnapshotFile) to a peer as
// a read-only copy and returns its Meta, which the integrator records in
// volumes/<unit>/<k>/<volume>/copies with the peer's node name. ctx bounds
// it; it is not retried (the next interval pushes a newer copy).
func (s *Store) Push(ctx context.Context, unit string, k int, path string, to Peer) (Meta, error) {
	if err := validSlot(unit, k, path); err != nil {
		return Meta{}, err
	}
	fail := func(err error) (Meta, error) {
		return Meta{}, fmt.Errorf("volume %s: push to %s: %w", key(unit, k, path), to.URL, err)
	}
	s.metaMu.RLock()
	m, err := readMeta(s.fileMetaPath(unit, k, path))
	var f *os.File
	if err == nil {
		f, err = os.Open(s.fileTarPath(unit, k, path))
	}
	s.metaMu.RUnlock()
	if err != nil {
		return fail(fmt.Errorf("no snapshot file: %w", err))
	}
	defer f.Close()
	u := volumePrefix(to.URL, unit, k, path) + "/copies?sha256=" + m.SHA256 +
		"&taken_at=" + url.QueryEscape(m.TakenAt.UTC().Format(time.RFC3339Nano))
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u, io.NopCloser(f))
	if err != nil {
		return fail(err)
	}
	req.ContentLength = m.Size
	req.Header.Set("Content-Type", "application/x-tar")
	for h, v := range to.Header {
		req.Header[h] = append([]string(nil), v...)
	}
	c := to.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fail(fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b))))
	}
	s.log().Info("volume: copy pushed", "volume", key(unit, k, path), "to", to.URL, "sha256", m.SHA256, "size", m.Size)
	return m, nil
}
