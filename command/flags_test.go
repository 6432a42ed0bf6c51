package command

import (
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// consulEnv is every variable api.DefaultConfig reads that the flags cover.
var consulEnv = []string{"CONSUL_HTTP_ADDR", "CONSUL_HTTP_TOKEN", "CONSUL_HTTP_TOKEN_FILE", "CONSUL_CACERT",
	"CONSUL_CAPATH", "CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_TLS_SERVER_NAME", "CONSUL_HTTP_SSL"}

func TestConsulFlags(t *testing.T) {
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type want struct {
		addr, token, tokenFile, ca, caPath, cert, key, sni string
	}
	cases := []struct {
		name    string
		env     map[string]string
		args    []string
		want    want
		wantErr string
	}{
		{name: "defaults", want: want{addr: "127.0.0.1:8500"}},
		{name: "environment",
			env: map[string]string{"CONSUL_HTTP_ADDR": "10.0.0.1:8500", "CONSUL_HTTP_TOKEN": "env-token",
				"CONSUL_CACERT": "/env/ca.pem", "CONSUL_CAPATH": "/env/cas", "CONSUL_CLIENT_CERT": "/env/c.pem",
				"CONSUL_CLIENT_KEY": "/env/k.pem", "CONSUL_TLS_SERVER_NAME": "env.consul"},
			want: want{addr: "10.0.0.1:8500", token: "env-token", ca: "/env/ca.pem", caPath: "/env/cas",
				cert: "/env/c.pem", key: "/env/k.pem", sni: "env.consul"}},
		{name: "flags win over the environment",
			env: map[string]string{"CONSUL_HTTP_ADDR": "10.0.0.1:8500", "CONSUL_HTTP_TOKEN": "env-token",
				"CONSUL_CACERT": "/env/ca.pem", "CONSUL_TLS_SERVER_NAME": "env.consul"},
			args: []string{"-consul-addr", "10.0.0.2:8501", "-token", "flag-token", "-ca-file", "/f/ca.pem",
				"-ca-path", "/f/cas", "-client-cert", "/f/c.pem", "-client-key", "/f/k.pem", "-tls-server-name", "f.consul"},
			want: want{addr: "10.0.0.2:8501", token: "flag-token", ca: "/f/ca.pem", caPath: "/f/cas",
				cert: "/f/c.pem", key: "/f/k.pem", sni: "f.consul"}},
		{name: "https address", args: []string{"-consul-addr", "https://consul.local:8501"},
			want: want{addr: "https://consul.local:8501"}},
		{name: "token file flag", args: []string{"-token-file", tokFile},
			want: want{addr: "127.0.0.1:8500", tokenFile: tokFile}},
		{name: "token file from the environment", env: map[string]string{"CONSUL_HTTP_TOKEN_FILE": tokFile},
			want: want{addr: "127.0.0.1:8500", tokenFile: tokFile}},
		{name: "token and token file", args: []string{"-token", "a", "-token-file", tokFile},
			wantErr: "give -token or -token-file, not both"},
		{name: "cert without key", args: []string{"-client-cert", "/f/c.pem"},
			wantErr: "-client-cert and -client-key go together"},
		{name: "key from the environment without cert", env: map[string]string{"CONSUL_CLIENT_KEY": "/env/k.pem"},
			wantErr: "-client-cert and -client-key go together"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range consulEnv {
				t.Setenv(k, tc.env[k])
			}
			var f consulFlags
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f.register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := f.config()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if _, err := f.client(); err == nil {
					t.Fatal("client() accepted what config() refused")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := want{addr: cfg.Address, token: cfg.Token, tokenFile: cfg.TokenFile, ca: cfg.TLSConfig.CAFile,
				caPath: cfg.TLSConfig.CAPath, cert: cfg.TLSConfig.CertFile, key: cfg.TLSConfig.KeyFile,
				sni: cfg.TLSConfig.Address}
			if got != tc.want {
				t.Errorf("config:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// The token file is read when the client is built and wins over the
// environment's token: the agent sees the file's token.
func TestConsulFlagsTokenFile(t *testing.T) {
	seen := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- r.Header.Get("X-Consul-Token"):
		default:
		}
		io.WriteString(w, `"127.0.0.1:8300"`)
	}))
	defer srv.Close()
	for _, k := range consulEnv {
		t.Setenv(k, "")
	}
	t.Setenv("CONSUL_HTTP_TOKEN", "env-token")
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := consulFlags{addr: srv.URL, tokenFile: tokFile}
	c, err := f.client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status().Leader(); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; got != "file-token" {
		t.Errorf("token sent = %q, want the file's", got)
	}
	f = consulFlags{tokenFile: filepath.Join(t.TempDir(), "missing")}
	if _, err := f.client(); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing token file: err = %v", err)
	}
}

// Every command's help that takes the flags documents them.
func TestConsulFlagsHelp(t *testing.T) {
	var f consulFlags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f.register(fs)
	fs.VisitAll(func(fl *flag.Flag) {
		if !strings.Contains(consulFlagsHelp, "-"+fl.Name+"=") {
			t.Errorf("consulFlagsHelp lacks -%s", fl.Name)
		}
		for _, h := range []string{(&RunCommand{}).Help(), (&StatusCommand{}).Help()} {
			if !strings.Contains(h, "-"+fl.Name+"=") {
				t.Errorf("a help text lacks -%s:\n%s", fl.Name, h)
			}
		}
	})
}
