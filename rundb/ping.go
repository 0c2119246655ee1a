package rundb

import (
	"context"
	"fmt"
)

// Ping checks that the database answers, for readiness probes.
func (d *DB) Ping(ctx context.Context) error {
	if err := d.client.Ping(ctx, nil); err != nil {
		return fmt.Errorf("ping database: %w", mapError(err))
	}
	return nil
}
