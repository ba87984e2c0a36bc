"""Lambda entry points, the project's declarations and its example jobs."""
