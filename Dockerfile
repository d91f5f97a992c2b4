# One image for the worker and the API; docker-compose.yml picks the command.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY providers providers
COPY activities activities
COPY workflows workflows
COPY api api
COPY store store
COPY fakeclouds fakeclouds
COPY cli.py worker.py settings.py ./
RUN pip install --no-cache-dir .
RUN useradd --create-home gpuprov
USER gpuprov
CMD ["python", "worker.py"]
