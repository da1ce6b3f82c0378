//go:build windows

package evidence

import "testing"

// On Windows a reserved device name or a colon names no file of the
// evidence folder: refused. (Not run on the Linux machines CI uses.)
func TestValidRelRefusesWindowsDeviceNames(t *testing.T) {
	for _, p := range []string{"CON", "nul.txt", "logs/COM1", "a:b", "x/aux"} {
		if validRel(p) {
			t.Errorf("validRel(%q) = true on Windows", p)
		}
	}
	if !validRel("logs/console.txt") {
		t.Error("validRel refuses an ordinary name")
	}
}
