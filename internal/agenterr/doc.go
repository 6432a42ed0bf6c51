// Package agenterr classifies the errors of a Consul HTTP request by who
// answered them, so a caller knows what asking again costs.
//
// Local errors are those the local Consul agent gives without reaching a
// server, or that no agent gives at all: the agent is not listening
// (connection refused: it is starting or restarting), or it has not yet
// joined its servers ("No known Consul servers"). Asking again costs the
// servers nothing, so a watch can ask again every RetryLocal and see the
// first answer after the agent joins at once, instead of backing off as
// it must when a server refused (no leader, overload): a node that just
// started, and is listed in the catalog as soon as its agent syncs, then
// sees a deployment as soon as its peers do and claims in its turn.
package agenterr
