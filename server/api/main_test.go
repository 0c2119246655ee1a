package api_test

import (
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/tokenpool"
)

// The API's handlers are tested through the whole server (server.New), which routes to them.

func TestMain(m *testing.M) { rundbtest.Main(m) }

// newTestServer returns a server over db (nil: none).
func newTestServer(t *testing.T, db *rundb.DB) *server.Server {
	t.Helper()
	s, err := server.New(server.Deps{
		Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4),
		DB: db, Version: "test", Database: "the test database",
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
