// Package templates holds the HTML templates, embedded in the binary so that a broken template
// fails the boot (they are parsed once at start) and not a request.
package templates

import "embed"

// FS holds every *.html template.
//
//go:embed *.html
var FS embed.FS
