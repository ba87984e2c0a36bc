"""Small fakes of real providers, for the example jobs. Each records its effects in DynamoDB.

They behave like the real thing where it matters to delivery guarantees: the payment
provider honours an Idempotency-Key as Stripe does; the email provider does not dedupe.
Failures are injected by input, like a provider's test mode (see each module).
"""
