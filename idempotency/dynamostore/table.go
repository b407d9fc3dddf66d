package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// The table: one string partition key, no sort key, no index, billed on
// demand, and the TTL attribute "purge" (epoch seconds).
const (
	attrPK    = "pk"
	attrPurge = "purge"
)

// CreateTable creates the store's table, name, and waits until it is
// ACTIVE (polling DescribeTable, for at most two minutes or until ctx
// ends), then turns on DynamoDB's TTL on the attribute "purge". The same
// table as infrastructure code (CloudFormation, Terraform):
//
//	AttributeDefinitions: [{AttributeName: pk, AttributeType: S}]
//	KeySchema:            [{AttributeName: pk, KeyType: HASH}]
//	BillingMode:          PAY_PER_REQUEST
//	TimeToLiveSpecification: {AttributeName: purge, Enabled: true}
//
// An emulator without the TTL API (dynalite answers UpdateTimeToLive with
// UnknownOperationException) gets the table without TTL: records then
// leave only through [Store.Prune], which is enough for tests.
//
// Errors: an *idempotency.InvalidError for a nil client or an empty name;
// the client's error, wrapped (a table that exists already:
// *types.ResourceInUseException).
func CreateTable(ctx context.Context, client *dynamodb.Client, name string) error {
	if client == nil {
		return invalidf("client", "nil: give a *dynamodb.Client")
	}
	if name == "" {
		return invalidf("name", "empty: name the table to create")
	}
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		return fmt.Errorf("dynamostore: create table %s: %w", name, err)
	}
	if err := waitActive(ctx, client, name); err != nil {
		return err
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(attrPurge), Enabled: aws.Bool(true)},
	})
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "UnknownOperationException" {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dynamostore: turn on TTL of table %s: %w", name, err)
	}
	return nil
}

// waitActive polls DescribeTable until the table is ACTIVE. The SDK's
// waiter starts at a 20-second delay; a new table is usually ACTIVE in
// seconds.
func waitActive(ctx context.Context, client *dynamodb.Client, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("dynamostore: wait for table %s: %w", name, err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dynamostore: table %s is %s, not ACTIVE: %w", name, out.Table.TableStatus, ctx.Err())
		case <-tick.C:
		}
	}
}

// checkTable answers a missing table, or one with another key, with an
// error that says how to create it.
func checkTable(ctx context.Context, client API, name string) error {
	out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	var nf *types.ResourceNotFoundException
	if errors.As(err, &nf) {
		return fmt.Errorf("dynamostore: table %s does not exist: create it with dynamostore.CreateTable(ctx, client, %q), or as its doc describes (partition key %q, type S; TTL on %q): %w",
			name, name, attrPK, attrPurge, err)
	}
	if err != nil {
		return fmt.Errorf("dynamostore: describe table %s: %w", name, err)
	}
	ks := out.Table.KeySchema
	if len(ks) != 1 || aws.ToString(ks[0].AttributeName) != attrPK {
		return invalidf("Config.Table", "table %s has another key schema than the store's (partition key %q of type S, no sort key): create one with dynamostore.CreateTable", name, attrPK)
	}
	return nil
}
