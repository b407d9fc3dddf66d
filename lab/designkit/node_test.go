package designkit

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/payonce/payonce/idempotency/dynamostore/dynamotest"
)

// TestNodeKits compiles each TypeScript kit with tsc and runs its tests
// with node's test runner against a real dynalite. The npm packages come
// from lab/designkit/.node, installed by .ci/deps/node.sh.
func TestNodeKits(t *testing.T) {
	need(t, "node.sh", "node")
	modules := filepath.Join(root(t), "lab", "designkit", ".node", "node_modules")
	if _, err := os.Stat(filepath.Join(modules, ".bin", "tsc")); err != nil {
		t.Fatalf("designkit: %s has no TypeScript compiler: run .ci/deps/node.sh (as root) to install the kit's npm packages", modules)
	}
	endpoint, err := dynamotest.Start()
	if err != nil {
		t.Fatalf("dynalite: %v", err)
	}
	for _, stack := range []string{"express-dynamodb-sqs"} {
		t.Run(stack, func(t *testing.T) {
			kit := generate(t, stack)
			if err := os.Symlink(modules, filepath.Join(kit, "node_modules")); err != nil {
				t.Fatal(err)
			}
			run(t, kit, nil, "node", filepath.Join("node_modules", "typescript", "bin", "tsc"), "-p", ".")
			out := run(t, kit, []string{"DYNAMO_ENDPOINT=" + endpoint, "NODE_NO_WARNINGS=1"},
				"node", "--test", "--test-concurrency=1", "--test-timeout=60000", "dist/test/")
			t.Logf("node --test:\n%s", out)
		})
	}
}
