package lease

import (
	"context"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/mariposa-sh/mariposa/internal/holdrule"
)

// NoLeaderAnswer classifies an error of a confirmation read as the lease
// does (noLeaderAnswer): holdrule.NoLeader when the local agent answered,
// relaying a server that could not reach a Raft leader; Unproven
// otherwise. The fleet's executor (fleet/executor) uses it for its own
// confirmations.
func NoLeaderAnswer(err error) holdrule.Kind { return noLeaderAnswer(err) }

// ServerProbe asks the server the local agent talks to whether it is
// without a leader, as the lease probes a confirmation read still
// unanswered (serverProbe): a stale read of key (NoLeader when the server
// knows no leader or has not heard from it for longer than silent, the
// lease's lock_delay/10) and /v1/status/leader (NoLeader when empty), at
// once; NoLeader as soon as one says so, Unproven otherwise (no answer
// proves nothing). The fleet's executor probes its held confirmations
// with it.
func ServerProbe(ctx context.Context, c *api.Client, key string, silent time.Duration) holdrule.Kind {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kinds := make(chan holdrule.Kind, 2)
	go func() { kinds <- staleProbe(ctx, c, key, silent) }()
	go func() { kinds <- leaderProbe(ctx, c) }()
	for range 2 {
		if <-kinds == holdrule.NoLeader {
			return holdrule.NoLeader
		}
	}
	return holdrule.Unproven
}

// staleProbe reads key with a stale read, which a server that has heard
// from a leader since it started answers from its own state, with
// X-Consul-KnownLeader (does it know a leader) and X-Consul-LastContact
// (since when it has not heard from it; 0 on the leader). staleKind says
// what that proves.
func staleProbe(ctx context.Context, c *api.Client, key string, silent time.Duration) holdrule.Kind {
	_, meta, err := c.KV().Get(key, (&api.QueryOptions{AllowStale: true}).WithContext(ctx))
	if err != nil {
		return noLeaderAnswer(err)
	}
	return staleKind(meta, silent)
}

// leaderProbe asks the server the local agent talks to which leader it
// knows; leaderKind says what the answer proves.
func leaderProbe(ctx context.Context, c *api.Client) holdrule.Kind {
	addr, err := c.Status().LeaderWithQueryOptions((&api.QueryOptions{}).WithContext(ctx))
	return leaderKind(addr, err)
}
