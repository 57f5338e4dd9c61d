"""The checks and small languages every config block and public entry point shares:
ConfigError and the key, order and size checks (every refusal names the key and
the fix), storage credentials, row filters, where-predicates (a small grammar,
never eval) and argument checks.

May import the ground floor only, so every stage can check its own block.
"""
