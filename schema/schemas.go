package schema

import "github.com/hashicorp/hcl/v2"

// Block schemas, one per block type.

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

// placementAttrs and placementBlocks say where and how many instances of a
// cluster unit run (a service with count, or a group with one): see
// placement.go. A group's members may not set them.
var (
	placementAttrs  = []string{"count", "max_per_node", "exclusive", "stop_after", "scheduler_algorithm"}
	placementBlocks = []string{"constraint", "affinity", "spread", "reschedule", "update"}
)

var groupSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "count"},
		{Name: "max_per_node"},
		{Name: "exclusive"},
		{Name: "stop_after"},
		{Name: "scheduler_algorithm"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "service", LabelNames: []string{"name"}},
		{Type: "constraint"},
		{Type: "affinity"},
		{Type: "spread"},
		{Type: "reschedule"},
		{Type: "update"},
		{Type: "volume", LabelNames: []string{"name"}},
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
		{Name: "user"},
		{Name: "group"},
		{Name: "no_new_privs"},
		{Name: "umask"},
		{Name: "count"},
		{Name: "max_per_node"},
		{Name: "exclusive"},
		{Name: "stop_after"},
		{Name: "scheduler_algorithm"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "check", LabelNames: []string{"name"}},
		{Type: "restart"},
		{Type: "depends_on", LabelNames: []string{"name"}},
		{Type: "template"},
		{Type: "leader"},
		{Type: "stop"},
		{Type: "resources"},
		{Type: "limits"},
		{Type: "constraint"},
		{Type: "affinity"},
		{Type: "spread"},
		{Type: "reschedule"},
		{Type: "update"},
		{Type: "volume", LabelNames: []string{"name"}},
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
		{Name: "user"},
		{Name: "group"},
		{Name: "change_mode"},
		{Name: "signal"},
		{Name: "command"},
		{Name: "wait"},
		{Name: "env"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "coordinate"},
	},
}

var coordinateSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "max_parallel"},
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

var resourcesSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "cpu"},
		{Name: "memory"},
		{Name: "memory_max"},
		{Name: "pids"},
	},
}

var limitsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "nofile"},
		{Name: "nproc"},
		{Name: "core"},
	},
}

var stopSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "signal"},
		{Name: "timeout"},
		{Name: "drain"},
	},
}

var constraintSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "attribute", Required: true},
		{Name: "operator"},
		{Name: "value"},
	},
}

var affinitySchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "attribute", Required: true},
		{Name: "operator"},
		{Name: "value"},
		{Name: "weight"},
	},
}

var spreadSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "attribute", Required: true},
		{Name: "weight"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "target", LabelNames: []string{"value"}},
	},
}

var spreadTargetSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "percent", Required: true},
	},
}

var rescheduleSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "attempts"},
		{Name: "interval"},
		{Name: "unlimited"},
		{Name: "delay"},
		{Name: "delay_function"},
		{Name: "max_delay"},
		{Name: "penalty"},
		{Name: "node_lost_after"},
	},
}

var updateSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "max_parallel"},
		{Name: "health_check"},
		{Name: "min_healthy_time"},
		{Name: "healthy_deadline"},
		{Name: "progress_deadline"},
		{Name: "canary"},
		{Name: "auto_promote"},
		{Name: "auto_revert"},
	},
}

var volumeSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "path"},
		{Name: "handoff"},
		{Name: "snapshot"},
		{Name: "restore"},
		{Name: "replicas"},
		{Name: "interval"},
		{Name: "restore_timeout"},
		{Name: "on_missing"},
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
	delayFunctions      = []string{DelayConstant, DelayExponential, DelayFibonacci}
	updateHealthChecks  = []string{UpdateChecks, UpdateRunning, UpdateManual}
	volumeHandoffs      = []string{HandoffNone, HandoffSticky, HandoffSnapshot}
	volumeOnMissing     = []string{OnMissingLatest, OnMissingEmpty, OnMissingFail}
	// constraintOperators are the hard operators; "=" is accepted as "==".
	constraintOperators = []string{OpEqual, OpNotEqual, OpRegexp, OpVersion, OpSetContains, OpIsSet, OpIsNotSet}
	// affinityOperators are the soft ones, and the hard ones counted as a
	// preference.
	affinityOperators = append([]string{OpPrefer, OpAvoid}, constraintOperators...)
)
