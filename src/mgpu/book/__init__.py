"""The book's own tools: sentences tied to measurements, budgets, figures, diagrams."""
