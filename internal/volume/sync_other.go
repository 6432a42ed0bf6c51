//go:build !linux

package volume

import "context"

// syncTree makes what an unpacker created durable (see sync_linux.go).
func syncTree(ctx context.Context, u *unpacker) error { return syncEach(ctx, u) }
