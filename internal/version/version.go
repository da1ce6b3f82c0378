// Package version reports the harnessfacts build.
package version

import "runtime/debug"

// Version is set at link time (-X github.com/harnessfacts/harnessfacts/internal/version.Version=v1.2.3);
// without it the module version or VCS revision of the build is used.
var Version = ""

// String returns the version of this build.
func String() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "devel-" + s.Value[:12]
		}
	}
	return "devel"
}
