"""The ISA expression language: a tree (`tree`), a parser (`parser`), typing (`typecheck`) and scalar
evaluation (`scalar`)."""
