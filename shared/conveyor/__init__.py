"""Conveyor: production background jobs on SQS, Lambda and DynamoDB."""
