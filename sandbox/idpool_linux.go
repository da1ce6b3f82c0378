package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// idRangeMapped checks that every id of r is mapped, as uid and as gid, in
// this process's user namespace. In a pod with hostUsers: false the map is
// "0 <host base> 65536": an id beyond it cannot be used (setuid fails, and
// files cannot be chowned to it).
func idRangeMapped(r IDRange) error {
	for _, f := range []string{"/proc/self/uid_map", "/proc/self/gid_map"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if !rangeInMap(r, string(b)) {
			return fmt.Errorf("id range %s is not mapped in this user namespace (%s: %q): choose ids inside the mapping, e.g. %s",
				r, f, strings.TrimSpace(string(b)), DefaultIDRange)
		}
	}
	return nil
}

// rangeInMap reports whether r lies in one line "inside outside count" of
// a uid_map or gid_map.
func rangeInMap(r IDRange, idMap string) bool {
	for _, line := range strings.Split(idMap, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		inside, err1 := strconv.ParseUint(f[0], 10, 64)
		count, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if uint64(r.First) >= inside && uint64(r.Last()) < inside+count {
			return true
		}
	}
	return false
}
