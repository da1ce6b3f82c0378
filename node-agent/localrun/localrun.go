// Package localrun runs a HarnessRun once on this machine without a cluster,
// for `harnessfacts run`: it reads run.yaml as the API server would (the
// CRD's schema, defaults and CEL rules, which the node-agent's daemon never
// needs), reads fixtures and secrets from folders, and has the executor
// carry out the attempt.
package localrun

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/crdschema"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
)

// ReadRunFile reads a HarnessRun from YAML and defaults and validates it
// exactly as the API server would, so a bad run.yaml is refused on a laptop
// with the same message a cluster gives.
func ReadRunFile(ctx context.Context, path string) (*harnessv1.HarnessRun, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// One object per file: a second document (another run, a Secret, a
	// ConfigMap) would otherwise be dropped without a word.
	docs := 0
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if js, err := yaml.YAMLToJSON(doc); err == nil && string(bytes.TrimSpace(js)) != "null" {
			docs++
		}
	}
	if docs > 1 {
		return nil, fmt.Errorf("%s holds %d YAML documents: harnessfacts run runs one HarnessRun per file (fixtures come from --fixtures, Secrets from --secrets)", path, docs)
	}
	// As the API server reads a request: a key given twice is refused, and
	// a whole number is an int64 (the CEL rules compare limits as ints).
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	obj := map[string]any{}
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if k, _ := obj["kind"].(string); k != "" && k != "HarnessRun" {
		return nil, fmt.Errorf("%s holds a %v, not a HarnessRun: harnessfacts run runs one HarnessRun (apply a HarnessSuite with kubectl, or try it with harnessfacts dev)", path, obj["kind"])
	}
	if err := crdschema.DefaultAndValidate(ctx, obj); err != nil {
		return nil, fmt.Errorf("%s is not a valid HarnessRun: %w", path, err)
	}
	defaulted, err := yaml.Marshal(obj)
	if err != nil {
		return nil, err
	}
	run := &harnessv1.HarnessRun{}
	if err := yaml.UnmarshalStrict(defaulted, run); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if run.Namespace == "" {
		run.Namespace = "default"
	}
	// The API server's checks of a custom resource's metadata: a name it
	// would refuse is refused here too (it names the evidence folder).
	if errs := apivalidation.ValidateObjectMeta(&run.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")); len(errs) > 0 {
		return nil, fmt.Errorf("%s is not a valid HarnessRun: %w", path, errs.ToAggregate())
	}
	return run, nil
}

// Run carries out one attempt of run on this machine, as its node-agent
// would on a cluster, and returns the run with its final status.
func Run(ctx context.Context, exec *executor.Executor, run *harnessv1.HarnessRun, nodeName string) (*harnessv1.HarnessRun, *executor.Outcome) {
	run = run.DeepCopy()
	if run.UID == "" {
		run.UID = uuid.NewUUID()
	}
	if nodeName == "" {
		nodeName, _ = os.Hostname()
	}
	now := metav1.Now()
	run.Status = harnessv1.HarnessRunStatus{
		Phase: harnessv1.RunRunning, NodeName: nodeName, Attempt: 1, ScheduledTime: &now, StartTime: &now,
	}
	out := exec.Execute(ctx, run)
	out.Apply(run, time.Now())
	return run, out
}
