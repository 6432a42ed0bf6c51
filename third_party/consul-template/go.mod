module github.com/hashicorp/consul-template

go 1.24.4

require (
	dario.cat/mergo v1.0.2
	github.com/BurntSushi/toml v1.5.0
	github.com/Masterminds/sprig/v3 v3.3.0
	github.com/davecgh/go-spew v1.1.2-0.20180830191138-d8f796af33cc
	github.com/hashicorp/consul/api v1.32.1
	github.com/hashicorp/go-rootcerts v1.0.2
	github.com/hashicorp/go-sockaddr v1.0.7
	github.com/hashicorp/hcl v1.0.1-vault-7
	github.com/mitchellh/go-homedir v1.1.0
	github.com/mitchellh/mapstructure v1.5.0
	github.com/pkg/errors v0.9.1
	github.com/ryanuber/go-glob v1.0.0
	golang.org/x/exp v0.0.0-20250711185948-6ae5c78190dc
	golang.org/x/text v0.27.0
	gopkg.in/yaml.v2 v2.4.0
)
