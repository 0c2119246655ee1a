package config

import (
	"strings"
	"testing"
)

func TestRedactURI(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mongodb://shoal:hunter2@db1:27017,db2/?replicaSet=rs0", "mongodb://REDACTED@db1:27017,db2/?replicaSet=rs0"},
		{"mongodb://shoal:pa%ss@db1:27017/", "mongodb://REDACTED@db1:27017/"},
		{"mongodb://shoal:p@ss/w@db1/", "mongodb://REDACTED@db1/"},
		{"mongodb+srv://u:p@cluster.example.org/?authSource=a@b", "mongodb+srv://REDACTED@cluster.example.org/?authSource=a@b"},
		{"mongodb://127.0.0.1:27017/", "mongodb://127.0.0.1:27017/"},
		{"admin:hunter2@db:27017", "REDACTED@db:27017"},
	} {
		got := RedactURI(tc.in)
		if got != tc.want {
			t.Errorf("RedactURI(%q) = %q, want %q", tc.in, got, tc.want)
		}
		for _, secret := range []string{"hunter2", "pa%ss", "p@ss"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactURI(%q) leaks %q", tc.in, secret)
			}
		}
	}
}
