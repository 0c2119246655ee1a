package embedded

import (
	"net/netip"
	"testing"
)

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000000000000000000001000000:0050": "[::1]:80",
		"0000000000000000FFFF00000100007F:01BB": "[::ffff:127.0.0.1]:443",
	} {
		got, err := parseProcAddr(in)
		if err != nil || got != netip.MustParseAddrPort(want) {
			t.Errorf("parseProcAddr(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
}
