package executor

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// HarborVerifierDir is where a Harbor verifier writes its reward, inside
// the task's environment. A check in an environment image finds a fresh,
// empty folder there (whatever the agent left at that path is hidden);
// every check also finds it as $HARNESSFACTS_REWARD_DIR.
const HarborVerifierDir = "/logs/verifier"

// HarborTestsDir and HarborSolutionDir are where Harbor puts a task's
// tests/ (for the verifier) and solution/ (for its oracle) in the task's
// container, and where their scripts name their files. In an environment
// image the checks find the fixture's verifier part there too, and an
// oracle's run its solution: bound over the image's overlay, never for
// another run's agent.
const (
	HarborTestsDir    = "/tests"
	HarborSolutionDir = "/solution"
)

// maxRewardFile bounds a reward file: a number, or a small JSON object.
const maxRewardFile = 64 << 10

// readReward reads the reward a check left in dir: reward.txt (a number)
// or reward.json ({"reward": <number>}, other keys ignored), as Harbor's
// verifiers write them. It returns "" and "" when there is neither. The
// check's processes are gone when this runs; the folder is still the
// check's, so nothing is followed out of it (os.Root) and only a regular
// file is read.
func readReward(dir string) (reward, problem string) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", ""
	}
	defer root.Close()
	for _, name := range []string{"reward.txt", "reward.json"} {
		fi, err := root.Lstat(name)
		if err != nil {
			continue
		}
		if !fi.Mode().IsRegular() {
			return "", name + " is not a regular file"
		}
		if fi.Size() > maxRewardFile {
			return "", fmt.Sprintf("%s has %d bytes, more than %d", name, fi.Size(), maxRewardFile)
		}
		f, err := openRegular(root, name)
		if err != nil {
			return "", fmt.Sprintf("%s: %v", name, err)
		}
		b, err := io.ReadAll(io.LimitReader(f, maxRewardFile))
		f.Close()
		if err != nil {
			return "", fmt.Sprintf("%s: %v", name, err)
		}
		v, err := parseReward(name, b)
		if err != nil {
			return "", err.Error()
		}
		return formatReward(v), ""
	}
	return "", ""
}

func parseReward(name string, b []byte) (float64, error) {
	var v float64
	if name == "reward.json" {
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(b, &doc); err != nil {
			return 0, fmt.Errorf("reward.json is not a JSON object")
		}
		raw, ok := doc["reward"]
		if !ok {
			return 0, fmt.Errorf(`reward.json has no "reward" key`)
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return 0, fmt.Errorf(`reward.json's "reward" is not a number`)
		}
	} else {
		var err error
		if v, err = strconv.ParseFloat(strings.TrimSpace(string(b)), 64); err != nil {
			return 0, fmt.Errorf("reward.txt does not hold a number")
		}
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%s holds a number that is not finite", name)
	}
	if v < 0 || v > 1 {
		// Harbor's verifiers write a score from 0 to 1 (Terminal-Bench
		// writes 0 or 1), and a suite's mean and interval are of such
		// scores: one 1e300, which the code a check runs can plant,
		// made a cell's mean meaningless. Refused, with the reason.
		return 0, fmt.Errorf("%s holds %s, outside [0, 1], the range of a reward", name, strconv.FormatFloat(v, 'g', 6, 64))
	}
	return v, nil
}

func formatReward(v float64) string { return strconv.FormatFloat(v, 'g', 10, 64) }

// meanReward is the mean of the checks' rewards, "" when none reported one.
func meanReward(checks []harnessv1.CheckResult) string {
	var sum float64
	var n int
	for _, c := range checks {
		if c.Reward == "" {
			continue
		}
		v, err := strconv.ParseFloat(c.Reward, 64)
		if err != nil {
			continue
		}
		sum += v
		n++
	}
	if n == 0 {
		return ""
	}
	return formatReward(sum / float64(n))
}
