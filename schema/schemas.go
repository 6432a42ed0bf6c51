package schema

import "github.com/hashicorp/hcl/v2"

// Block schemas, one per block type. Reserved names of the cluster phase
// (SPEC section 7) are in the schemas so they parse and then get a
// "not supported yet" error instead of "unsupported argument".

var rootSchema = &hcl.BodySchema{
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "variable", LabelNames: []string{"name"}},
		{Type: "service", LabelNames: []string{"name"}},
		{Type: "group", LabelNames: []string{"name"}},
	},
}

var variableSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "default"},
		{Name: "type"},
		{Name: "description"},
	},
}

// reservedBlocks are the cluster-phase block names, valid in service and
// group bodies (the attribute `count` is reserved in the schemas).
var reservedBlocks = []string{"constraint", "affinity", "update"}

var groupSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "count"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "service", LabelNames: []string{"name"}},
		{Type: "constraint"},
		{Type: "affinity"},
		{Type: "update"},
	},
}

var serviceSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "command", Required: true},
		{Name: "id"},
		{Name: "dir"},
		{Name: "env"},
		{Name: "port"},
		{Name: "address"},
		{Name: "tags"},
		{Name: "meta"},
		{Name: "version"},
		{Name: "count"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "check", LabelNames: []string{"name"}},
		{Type: "restart"},
		{Type: "depends_on", LabelNames: []string{"name"}},
		{Type: "template"},
		{Type: "leader"},
		{Type: "stop"},
		{Type: "constraint"},
		{Type: "affinity"},
		{Type: "update"},
	},
}

var checkSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "http"},
		{Name: "tcp"},
		{Name: "grpc"},
		{Name: "args"},
		{Name: "ttl"},
		{Name: "interval"},
		{Name: "timeout"},
		{Name: "success_before_passing"},
		{Name: "failures_before_critical"},
		{Name: "deregister_critical_after"},
	},
}

// checkKinds are the attributes of which a check has exactly one.
var checkKinds = []string{"http", "tcp", "grpc", "args", "ttl"}

var restartSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "policy"},
		{Name: "on_unhealthy"},
		{Name: "grace"},
		{Name: "unhealthy_for"},
		{Name: "attempts"},
		{Name: "window"},
		{Name: "delay"},
		{Name: "max_delay"},
		{Name: "on_exhausted"},
	},
}

var dependsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "service"},
		{Name: "tag"},
		{Name: "registered"},
		{Name: "passing"},
		{Name: "timeout"},
		{Name: "on_lost"},
		{Name: "env_prefix"},
	},
}

var templateSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "source"},
		{Name: "contents"},
		{Name: "destination", Required: true},
		{Name: "perms"},
		{Name: "change_mode"},
		{Name: "signal"},
		{Name: "command"},
		{Name: "wait"},
		{Name: "env"},
	},
}

var leaderSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "mode"},
		{Name: "tag"},
		{Name: "follower_tag"},
		{Name: "key"},
		{Name: "session_ttl"},
		{Name: "lock_delay"},
		{Name: "change_mode"},
		{Name: "signal"},
	},
}

var stopSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "signal"},
		{Name: "timeout"},
		{Name: "drain"},
	},
}

// Enumerations.
var (
	restartPolicies     = []string{"always", "on-failure", "never"}
	onExhaustedValues   = []string{"fail", "reschedule"}
	onLostValues        = []string{"ignore", "restart", "stop"}
	templateChangeModes = []string{"restart", "signal", "command", "noop"}
	leaderModes         = []string{"standby", "tag"}
	leaderChangeModes   = []string{"restart", "signal", "noop"}
)
