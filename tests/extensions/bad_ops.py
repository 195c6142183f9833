"""An operator file with a mistake that shows only when the operator is built (test_user_ops.py)."""


def not_placeholders():
    return [1, 2], None
