"""chorus-plan: predicts how a chorus training scales before it runs at scale
(docs/planner.md). Python standard library only."""
