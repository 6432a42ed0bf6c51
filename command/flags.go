package command

import (
	"errors"
	"flag"
	"os"
	"strings"

	"github.com/hashicorp/consul/api"
)

// consulFlags are the flags of every command that talks to Consul, as the
// consul CLI has them. A flag left unset keeps what api.DefaultConfig reads
// from the CONSUL_HTTP_* environment, so the two tools agree.
type consulFlags struct {
	addr, token, tokenFile     string
	caFile, caPath, clientCert string
	clientKey, tlsServerName   string
}

// register adds the flags to fs.
func (f *consulFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "consul-addr", "", "")
	fs.StringVar(&f.token, "token", "", "")
	fs.StringVar(&f.tokenFile, "token-file", "", "")
	fs.StringVar(&f.caFile, "ca-file", "", "")
	fs.StringVar(&f.caPath, "ca-path", "", "")
	fs.StringVar(&f.clientCert, "client-cert", "", "")
	fs.StringVar(&f.clientKey, "client-key", "", "")
	fs.StringVar(&f.tlsServerName, "tls-server-name", "", "")
}

// config is api.DefaultConfig (the environment) with the flags given on top.
// The token precedence is api.NewClient's: -token-file, -token,
// CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_TOKEN.
func (f *consulFlags) config() (*api.Config, error) {
	if f.token != "" && f.tokenFile != "" {
		return nil, errors.New("give -token or -token-file, not both")
	}
	cfg := api.DefaultConfig()
	if os.Getenv(api.HTTPAddrEnvName) == "" {
		// The consul CLI's default; the api package's "localhost" may
		// resolve to ::1 first, where a dev agent does not listen.
		cfg.Address = defaultConsulAddr
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&cfg.Address, strings.TrimSpace(f.addr))
	set(&cfg.Token, f.token)
	set(&cfg.TokenFile, f.tokenFile)
	set(&cfg.TLSConfig.CAFile, f.caFile)
	set(&cfg.TLSConfig.CAPath, f.caPath)
	set(&cfg.TLSConfig.CertFile, f.clientCert)
	set(&cfg.TLSConfig.KeyFile, f.clientKey)
	set(&cfg.TLSConfig.Address, f.tlsServerName)
	// The api package silently ignores half a key pair; say so instead.
	if (cfg.TLSConfig.CertFile == "") != (cfg.TLSConfig.KeyFile == "") {
		return nil, errors.New("-client-cert and -client-key go together (or CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY)")
	}
	return cfg, nil
}

// client is an API client for config.
func (f *consulFlags) client() (*api.Client, error) {
	cfg, err := f.config()
	if err != nil {
		return nil, err
	}
	return api.NewClient(cfg)
}

const defaultConsulAddr = "127.0.0.1:8500"

// consulFlagsHelp documents consulFlags in the commands' help texts.
const consulFlagsHelp = `Consul options (the consul CLI's flags and environment variables):

  -consul-addr=ADDR       Consul HTTP API address: host:port, http://...,
                          https://... or unix:///path (default
                          $CONSUL_HTTP_ADDR or 127.0.0.1:8500).
  -token=TOKEN            ACL token (default $CONSUL_HTTP_TOKEN).
  -token-file=PATH        File holding the ACL token; wins over -token and
                          the environment (default $CONSUL_HTTP_TOKEN_FILE).
  -ca-file=PATH           CA certificate to verify the agent with (default
                          $CONSUL_CACERT).
  -ca-path=DIR            Directory of CA certificates (default
                          $CONSUL_CAPATH).
  -client-cert=PATH       Client certificate for TLS (default
                          $CONSUL_CLIENT_CERT); needs -client-key.
  -client-key=PATH        Its private key (default $CONSUL_CLIENT_KEY).
  -tls-server-name=NAME   Server name to verify in the agent's certificate
                          (default $CONSUL_TLS_SERVER_NAME).`
