package stripetest_test

import (
	"testing"

	"github.com/payonce/payonce/providers/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }
