package scheduler

import (
	"math"
	"strconv"
	"strings"

	"github.com/shoal-chess/shoal/rundb"
)

var inf = math.Inf(1)

// shortName is a worker's name for duplicate detection and blocking:
// "{username}-{concurrency}cores-{first segment of unique_key}".
func shortName(w rundb.WorkerInfo) string {
	name := w.Username + "-" + strconv.Itoa(w.Concurrency) + "cores"
	if w.UniqueKey != "" {
		name += "-" + strings.SplitN(w.UniqueKey, "-", 2)[0]
	}
	return name
}

// longName adds the second segment of unique_key, and a star for a modified worker.
func longName(w rundb.WorkerInfo) string {
	name := shortName(w)
	if parts := strings.Split(w.UniqueKey, "-"); w.UniqueKey != "" && len(parts) >= 2 {
		name += "-" + parts[1]
	}
	if w.Modified {
		name += "*"
	}
	return name
}
