import { Type } from "typebox";

/** JSON schema of a problem document, referenced by every route's error responses in the OpenAPI documents. */
export const problemSchema = Type.Object(
  {
    type: Type.String({ description: "Stable identifier of the kind of error (urn:flowplane:problem:<code>)." }),
    title: Type.String(),
    status: Type.Integer(),
    detail: Type.String({ description: "What went wrong and what to change." }),
    instance: Type.String({ description: "The path of the request." }),
  },
  { additionalProperties: true, description: "RFC 9457 problem document" },
);

/** Error responses shared by every authenticated JSON route, for the OpenAPI documents. */
export const standardErrorResponses = {
  400: problemSchema,
  401: problemSchema,
  403: problemSchema,
  404: problemSchema,
  413: problemSchema,
  415: problemSchema,
} as const;
