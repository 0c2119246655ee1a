package runs_test

import (
	"testing"

	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/ui/uitest"
)

// These pages are tested through the whole server, which routes to them (uitest): uiEnv and
// browser are uitest's, with this package's own helpers as their methods.

func TestMain(m *testing.M) { rundbtest.Main(m) }

// uiEnv is a primary server over a fresh database with the UI's usual cast (uitest.Env).
type uiEnv struct{ *uitest.Env }

// browser is a client with a cookie jar, like a person's browser (uitest.Browser).
type browser struct{ *uitest.Browser }

const uiPassword = uitest.Password

// body returns a reply's body as a string.
var body = uitest.Body

func newUIEnv(t *testing.T) *uiEnv {
	t.Helper()
	return &uiEnv{uitest.New(t, nil)}
}

// newUIEnvWith is newUIEnv with the server's dependencies adjusted by change first, if not nil.
func newUIEnvWith(t *testing.T, change func(*server.Deps)) *uiEnv {
	t.Helper()
	return &uiEnv{uitest.New(t, change)}
}

// newUIEnvSched is newUIEnvWith whose scheduler has cfg (and a semaphore of five).
func newUIEnvSched(t *testing.T, cfg scheduler.Config, change func(*server.Deps)) *uiEnv {
	t.Helper()
	return &uiEnv{uitest.NewSched(t, cfg, change)}
}

// anon returns a browser that is not logged in.
func (e *uiEnv) anon() *browser { return &browser{e.Anon()} }

// as returns a browser logged in as username, through the login form.
func (e *uiEnv) as(username string) *browser {
	e.T.Helper()
	return &browser{e.As(username)}
}

// onSecondary returns a browser with b's session on a secondary instance sharing the database
// (uitest.Browser.OnSecondary).
func (b *browser) onSecondary(t *testing.T) *browser { return &browser{b.OnSecondary(t)} }
