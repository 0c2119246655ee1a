package ui

import "github.com/shoal-chess/shoal/server/guard"

// What the external tests of what every page shares (package ui_test, which drive the UI
// through the whole server) use of its insides.

var BaseFuncs = baseFuncs

const (
	MaxFormBody = maxFormBody
)

// HeavyReads are s's slots for reads that scan, shared with the API.
func HeavyReads(s *Server) *guard.HeavyReads { return s.heavy }
