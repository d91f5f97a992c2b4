-- Temporal's auto-setup creates its own databases; gpuprov's projection lives in `gpuprov`.
SELECT 1;
