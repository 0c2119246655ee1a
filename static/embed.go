// Package static holds the web UI's assets, embedded in the binary.
package static

import "embed"

// FS holds every asset, served under /static/.
//
//go:embed *.css *.js
var FS embed.FS
