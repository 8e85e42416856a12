"""One APIRouter per resource: trainings, health, metrics."""
