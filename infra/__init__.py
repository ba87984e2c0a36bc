"""Deploy-time CDK constructs. Nothing at runtime imports this package."""
