package notify

import (
	"testing"

	"github.com/shoal-chess/shoal/rundb/rundbtest"
)

func TestMain(m *testing.M) { rundbtest.Main(m) }
