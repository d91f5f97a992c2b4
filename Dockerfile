# One image for the worker and the API; docker-compose.yml picks the command. The simulated clouds
# (fakeclouds/, a distribution of their own) are not in it.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 GPUPROV_HOME=/var/lib/gpuprov
WORKDIR /app
COPY pyproject.toml README.md ./
COPY providers providers
COPY messages messages
COPY activities activities
COPY workflows workflows
COPY api api
COPY store store
COPY cli cli
COPY worker.py settings.py logsafe.py ./
RUN pip install --no-cache-dir .
# A non-root user that owns its (0700) home: the service writes nothing anywhere else but its
# temporary files (the API's counters directory, api/serve.py; an SDK's CA bundle), in the container's /tmp.
RUN useradd --system --create-home --home-dir /var/lib/gpuprov gpuprov \
    && chmod 0700 /var/lib/gpuprov
USER gpuprov
CMD ["python", "worker.py"]
