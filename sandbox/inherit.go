package sandbox

import "github.com/harnessfacts/harnessfacts/internal/cloexec"

// inheritedErr says whether the descriptors this process inherited (a
// shell's, a CI runner's pipes; a file a script opened without
// close-on-exec) could be marked close-on-exec as the package loaded,
// before any sandbox or slirp4netns starts. Go leaves inherited
// descriptors as they came and bwrap hands on whatever it is given, so
// without this they reached every agent. A runner refuses to start if it
// failed.
var inheritedErr = cloexec.Inherited()
