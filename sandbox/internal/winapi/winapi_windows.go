//go:build windows

package winapi

import "golang.org/x/sys/windows"

// ProcThreadAttributeSecurityCapabilities is PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES:
// the attribute that starts a process inside an AppContainer.
const ProcThreadAttributeSecurityCapabilities = 0x00020009

// SecurityCapabilities is SECURITY_CAPABILITIES. With CapabilityCount 0 the
// AppContainer has no capabilities at all (no network, no user files).
type SecurityCapabilities struct {
	AppContainerSid *windows.SID
	Capabilities    *windows.SIDAndAttributes
	CapabilityCount uint32
	Reserved        uint32
}

// These return an HRESULT; mkwinsyscall turns a non-zero one into the error.
//sys	CreateAppContainerProfile(name *uint16, displayName *uint16, description *uint16, capabilities *windows.SIDAndAttributes, capabilityCount uint32, sid **windows.SID) (hr error) = userenv.CreateAppContainerProfile
//sys	DeleteAppContainerProfile(name *uint16) (hr error) = userenv.DeleteAppContainerProfile
//sys	DeriveAppContainerSidFromAppContainerName(name *uint16, sid **windows.SID) (hr error) = userenv.DeriveAppContainerSidFromAppContainerName
