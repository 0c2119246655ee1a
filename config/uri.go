package config

import "strings"

// RedactURI hides the user information (user and password) of a MongoDB URI so that it can be
// logged. It works on the text, so it cannot fail on a URI that does not parse (a password with
// a stray '%', say), which is exactly when an error message would print it.
func RedactURI(uri string) string {
	prefix, rest := "", uri
	if i := strings.Index(uri, "://"); i >= 0 {
		prefix, rest = uri[:i+len("://")], uri[i+len("://"):]
	}
	hosts := rest
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		hosts = rest[:q]
	}
	at := strings.LastIndex(hosts, "@")
	if at < 0 {
		return uri
	}
	return prefix + "REDACTED" + rest[at:]
}
