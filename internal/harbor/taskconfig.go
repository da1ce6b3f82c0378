package harbor

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// taskConfig is task.toml as Harbor documents it: the schema-1.0 layout
// (version, [metadata], [verifier], [agent], [environment], [solution],
// source) and the later one ([task] with name, description, authors and
// keywords, schema_version). Every field the importer knows is here, mapped
// or dropped on purpose (docs/harbor.md); a key that is not here is
// reported as unknown, never dropped silently.
type taskConfig struct {
	Version       string         `toml:"version"`
	SchemaVersion string         `toml:"schema_version"`
	Source        string         `toml:"source"`
	Task          taskSection    `toml:"task"`
	Metadata      map[string]any `toml:"metadata"`
	Verifier      verifierConfig `toml:"verifier"`
	Agent         agentConfig    `toml:"agent"`
	Environment   envConfig      `toml:"environment"`
	Solution      solutionConfig `toml:"solution"`
	// Steps are multi-step tasks; the importer refuses them.
	Steps []map[string]any `toml:"steps"`
}

type taskSection struct {
	Name        string   `toml:"name"`
	Description string   `toml:"description"`
	Authors     []author `toml:"authors"`
	Keywords    []string `toml:"keywords"`
}

type author struct {
	Name  string `toml:"name"`
	Email string `toml:"email"`
}

type verifierConfig struct {
	TimeoutSec *float64          `toml:"timeout_sec"`
	Env        map[string]string `toml:"env"`
	User       string            `toml:"user"`
	// Environment is a separate verifier sandbox; not supported.
	Environment map[string]any `toml:"environment"`
}

type agentConfig struct {
	TimeoutSec      *float64 `toml:"timeout_sec"`
	SetupTimeoutSec *float64 `toml:"setup_timeout_sec"`
	User            string   `toml:"user"`
}

type envConfig struct {
	BuildTimeoutSec *float64         `toml:"build_timeout_sec"`
	DockerImage     string           `toml:"docker_image"`
	CPUs            *float64         `toml:"cpus"`
	MemoryMB        *int64           `toml:"memory_mb"`
	StorageMB       *int64           `toml:"storage_mb"`
	Memory          string           `toml:"memory"`
	Storage         string           `toml:"storage"`
	GPUs            *int64           `toml:"gpus"`
	GPUTypes        []string         `toml:"gpu_types"`
	TPU             map[string]any   `toml:"tpu"`
	AllowInternet   *bool            `toml:"allow_internet"`
	MCPServers      []map[string]any `toml:"mcp_servers"`
	SkillsDir       string           `toml:"skills_dir"`
	OS              string           `toml:"os"`
}

type solutionConfig struct {
	Env map[string]string `toml:"env"`
}

// parseTaskConfig decodes task.toml. Keys it does not know come back as
// unknown ("environment.foo"), sorted, for the caller to warn about.
func parseTaskConfig(data []byte) (*taskConfig, []string, error) {
	var c taskConfig
	if err := toml.Unmarshal(data, &c); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, nil, fmt.Errorf("task.toml line %d column %d: %s", row, col, de.Error())
		}
		return nil, nil, fmt.Errorf("task.toml: %w", err)
	}
	var unknown []string
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var strict taskConfig
	if err := dec.Decode(&strict); err != nil {
		var sm *toml.StrictMissingError
		if !errors.As(err, &sm) {
			return nil, nil, fmt.Errorf("task.toml: %w", err)
		}
		for _, e := range sm.Errors {
			unknown = append(unknown, strings.Join(e.Key(), "."))
		}
	}
	sort.Strings(unknown)
	return &c, unknown, nil
}
