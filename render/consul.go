package render

import (
	"io"
	"log"
	"strings"
	"time"

	dep "github.com/hashicorp/consul-template/dependency"
	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// newClientSet builds consul-template's client set from the same settings the
// rest of mariposa uses. consul-template cannot adopt an existing *api.Client,
// so the settings are carried over field by field.
func newClientSet(cfg *api.Config) (*dep.ClientSet, error) {
	if cfg == nil {
		cfg = api.DefaultConfig()
	}
	in := &dep.CreateConsulClientInput{
		Address:   cfg.Address,
		Namespace: cfg.Namespace,
		Token:     cfg.Token,
		TokenFile: cfg.TokenFile,

		SSLEnabled: strings.EqualFold(cfg.Scheme, "https"),
		SSLVerify:  !cfg.TLSConfig.InsecureSkipVerify,
		SSLCert:    cfg.TLSConfig.CertFile,
		SSLKey:     cfg.TLSConfig.KeyFile,
		SSLCACert:  cfg.TLSConfig.CAFile,
		SSLCAPath:  cfg.TLSConfig.CAPath,
		ServerName: cfg.TLSConfig.Address,

		// consul-template's defaults: every blocking query holds a
		// connection, so keep enough idle ones to avoid re-dialling.
		TransportDialKeepAlive:       30 * time.Second,
		TransportDialTimeout:         10 * time.Second,
		TransportIdleConnTimeout:     90 * time.Second,
		TransportMaxIdleConnsPerHost: 256,
		TransportTLSHandshakeTimeout: 10 * time.Second,
	}
	if cfg.HttpAuth != nil {
		in.AuthEnabled = true
		in.AuthUsername = cfg.HttpAuth.Username
		in.AuthPassword = cfg.HttpAuth.Password
	}
	if strings.HasPrefix(cfg.Address, "https://") {
		in.SSLEnabled = true
	}
	cs := dep.NewClientSet()
	if err := cs.CreateConsulClient(in); err != nil {
		return nil, err
	}
	return cs, nil
}

// RouteStdLog sends the standard library logger, which consul-template's
// packages write to with "[TRACE]"-style prefixes, through l at the level
// each line names, so its trace chatter is filtered like the rest of the log.
// NewManager calls it; it affects the whole process.
// Each line is rewritten first (redactStdLine): consul-template's trace
// logs the value every key query returned (`kv.block(app/secret): returned
// "<the value>"`), which becomes its size.
func RouteStdLog(l hclog.Logger) {
	w := l.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true, InferLevelsWithTimestamp: true})
	log.SetOutput(redactingWriter{w})
}

// redactingWriter passes the standard logger's lines (one per Write) to w,
// each through redactStdLine.
type redactingWriter struct{ w io.Writer }

func (rw redactingWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(rw.w, redactStdLine(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
