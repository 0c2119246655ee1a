package guard

import (
	"context"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/tokenpool"
)

// Reads that may scan much of a collection (event log searches) take one of HeavyReadSlots
// before their database token, and wait for it at most heavyReadWait: however many arrive,
// only that many run at once, so they cannot crowd out the worker path's database work (or
// its CPU, on the embedded database, which scans in this process).
const (
	HeavyReadSlots = 2
	heavyReadWait  = 3 * time.Second
	// HeavyBusyText is what a read refused for want of a slot is told.
	HeavyBusyText = "Searches are busy right now; try again in a few seconds."
)

// HeavyReads are one server's slots for reads that scan, shared by the API's and the web UI's
// searches and kept apart from the worker path's tokens. Safe for concurrent use.
type HeavyReads struct{ *tokenpool.Pool }

// NewHeavyReads returns HeavyReadSlots free slots.
func NewHeavyReads() *HeavyReads { return &HeavyReads{tokenpool.New(HeavyReadSlots)} }

// Slot waits up to heavyReadWait for a heavy-read slot, which the caller then Releases;
// without one it marks the refusal as expected (any client can cause it) and sets Retry-After,
// and the caller answers.
func (h *HeavyReads) Slot(c *gin.Context) bool {
	ctx, cancel := context.WithTimeout(c.Request.Context(), heavyReadWait)
	defer cancel()
	if h.Acquire(ctx) != nil {
		c.Header("Retry-After", "5")
		ExpectRefusal(c)
		return false
	}
	return true
}
