package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
)

// Upgrader is a Target that can upgrade mariposa in place (mariposa
// upgrade): Prepare checks the binary at mariposa's path and freezes the
// node; the answer goes to the caller, then commit execs it (and, should
// the exec fail, undoes the freeze and logs why).
type Upgrader interface {
	PrepareUpgrade(by string) (UpgradeResult, func(), error)
}

// UpgradeResult is the answer of POST /v1/upgrade.
type UpgradeResult struct {
	From string `json:"from"` // the running version
	To   string `json:"to"`   // the version of the binary it execs
	PID  int    `json:"pid"`  // the same before and after
	Path string `json:"path"` // the binary
	// Image names the process image that answered (GET /v1/version's
	// image): the upgrade is done when another image answers, with the
	// same PID, whatever the versions (an upgrade to the same version, a
	// rebuild or a re-exec, is one too).
	Image string `json:"image,omitempty"`
}

// VersionInfo is the answer of GET /v1/version: which build answers.
type VersionInfo struct {
	Version string `json:"version"`
	PID     int    `json:"pid"`
	// Image is random per process image: an exec in place changes it, the
	// PID stays.
	Image string `json:"image,omitempty"`
	// UpgradeError says why the last upgrade in place failed after it was
	// accepted (the exec itself): this build goes on.
	UpgradeError string `json:"upgrade_error,omitempty"`
	// Upgraded is set in a build that took over by an upgrade in place.
	Upgraded *Upgraded `json:"upgraded,omitempty"`
}

// Upgraded says which build handed over, and how long mariposa's liveness
// check went without an update across the upgrade (once this build has
// updated it: 0 before).
type Upgraded struct {
	From         string  `json:"from"`
	CheckGapSecs float64 `json:"check_gap_seconds,omitempty"`
}

var upgraded atomic.Pointer[func() *Upgraded]

// image names this process image (VersionInfo.Image).
var image = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// SetUpgraded sets what GET /v1/version says of the upgrade that started
// this build.
func SetUpgraded(f func() *Upgraded) { upgraded.Store(&f) }

// versionString is the running build (set by the command package: the
// version package is above internal/).
var versionString = func() string { return "" }

// SetVersion sets what GET /v1/version answers.
func SetVersion(f func() string) { versionString = f }

var upgradeErr atomic.Pointer[string]

// SetUpgradeError records why an accepted upgrade failed (GET /v1/version).
func SetUpgradeError(err error) {
	msg := err.Error()
	upgradeErr.Store(&msg)
}

// Version is GET /v1/version.
func (h *Handlers) Version(w http.ResponseWriter, r *http.Request) {
	v := VersionInfo{Version: versionString(), PID: os.Getpid(), Image: image}
	if e := upgradeErr.Load(); e != nil {
		v.UpgradeError = *e
	}
	if f := upgraded.Load(); f != nil {
		v.Upgraded = (*f)()
	}
	writeJSON(w, http.StatusOK, v)
}

// Upgrade is POST /v1/upgrade.
func (h *Handlers) Upgrade(w http.ResponseWriter, r *http.Request) {
	u, ok := h.target.(Upgrader)
	if !ok {
		writeError(w, http.StatusNotImplemented, "this mariposa cannot upgrade in place")
		return
	}
	log, c := h.audit(r, "upgrade", "")
	res, commit, err := u.PrepareUpgrade(c.Actor)
	if err != nil {
		log.Warn("upgrade refused", "error", err)
		writeError(w, http.StatusConflict, err.Error())
		return
	}
	log.Info("upgrading in place", "from", res.From, "to", res.To, "path", res.Path)
	res.Image = image
	// An error of an earlier attempt is not this one's.
	upgradeErr.Store(nil)
	writeJSON(w, http.StatusOK, res)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	// The answer is in the caller's socket buffer: it outlives the exec.
	commit()
}

// Upgrade asks the running mariposa to upgrade in place.
func (c *Client) Upgrade(ctx context.Context) (UpgradeResult, error) {
	var res UpgradeResult
	resp, err := c.do(ctx, http.MethodPost, "/v1/upgrade", "", nil)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err := json.Unmarshal(body, &res); err != nil {
		return res, errors.New("mariposa's answer to the upgrade is not what this client expects: " + err.Error())
	}
	return res, nil
}

// Version asks which build answers.
func (c *Client) Version(ctx context.Context) (VersionInfo, error) {
	var v VersionInfo
	resp, err := c.do(ctx, http.MethodGet, "/v1/version", "", nil)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&v)
	return v, err
}
